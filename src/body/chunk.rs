//! [`Chunk`]: the unit of response data, a few shared byte slices written as one.
//!
//! A watch event is a tiny per-type header (`{"type":"ADDED","object":`), the
//! object's encoded bytes shared by every watcher that receives it, and a
//! two-byte tail (`}\n`). Copying the object into a per-watcher buffer would
//! cost one copy per watcher per event; instead the three parts travel as one
//! chunk and reach the socket through `chunks_vectored`, so hyper writes them
//! with a single vectored write (and, on HTTP/1.1, as one chunked-encoding
//! chunk rather than three).

use std::io::IoSlice;

use bytes::{Buf, Bytes};

/// Up to three byte slices read as one buffer.
#[derive(Debug, Clone, Default)]
pub struct Chunk {
    parts: [Bytes; 3],
    /// Index of the first part not fully consumed.
    current: usize,
}

impl Chunk {
    /// A chunk of three parts, e.g. header, shared object, tail.
    pub fn parts(head: Bytes, body: Bytes, tail: Bytes) -> Self {
        let mut chunk = Self { parts: [head, body, tail], current: 0 };
        chunk.skip_empty();
        chunk
    }

    fn skip_empty(&mut self) {
        while self.current < 3 && self.parts[self.current].is_empty() {
            self.current += 1;
        }
    }

    fn copy_to_vec(&mut self, len: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(len);
        while v.len() < len {
            let take = (len - v.len()).min(self.chunk().len());
            assert!(take > 0, "copied past the end of a Chunk");
            v.extend_from_slice(&self.chunk()[..take]);
            self.advance(take);
        }
        v
    }
}

impl From<Bytes> for Chunk {
    fn from(bytes: Bytes) -> Self {
        Self::parts(Bytes::new(), bytes, Bytes::new())
    }
}

impl Buf for Chunk {
    fn remaining(&self) -> usize {
        self.parts.iter().skip(self.current).map(Bytes::len).sum()
    }

    fn chunk(&self) -> &[u8] {
        self.parts.get(self.current).map_or(&[], |b| b.as_ref())
    }

    fn advance(&mut self, mut cnt: usize) {
        while cnt > 0 {
            assert!(self.current < 3, "advanced past the end of a Chunk");
            let part = &mut self.parts[self.current];
            let n = cnt.min(part.len());
            part.advance(n);
            cnt -= n;
            self.skip_empty();
        }
    }

    fn chunks_vectored<'a>(&'a self, dst: &mut [IoSlice<'a>]) -> usize {
        let mut n = 0;
        for part in self.parts.iter().skip(self.current) {
            if n == dst.len() {
                break;
            }
            if !part.is_empty() {
                dst[n] = IoSlice::new(part);
                n += 1;
            }
        }
        n
    }

    fn copy_to_bytes(&mut self, len: usize) -> Bytes {
        // The common case, one part holding all that is asked, stays zero-copy.
        if self.parts.get(self.current).is_some_and(|p| p.len() >= len) {
            let out = self.parts[self.current].split_to(len);
            self.skip_empty();
            return out;
        }
        Bytes::from(self.copy_to_vec(len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(mut c: Chunk) -> Vec<u8> {
        let mut out = Vec::new();
        while c.has_remaining() {
            let n = c.chunk().len().min(3);
            out.extend_from_slice(&c.chunk()[..n]);
            c.advance(n);
        }
        out
    }

    #[test]
    fn parts_read_as_one_buffer() {
        let c = Chunk::parts(Bytes::from_static(b"{\"a\":"), Bytes::from_static(b"123"), Bytes::from_static(b"}\n"));
        assert_eq!(c.remaining(), 10);
        let mut slices = [IoSlice::new(&[]); 4];
        assert_eq!(c.chunks_vectored(&mut slices), 3);
        assert_eq!(drain(c), b"{\"a\":123}\n");
    }

    #[test]
    fn empty_parts_are_skipped() {
        let c = Chunk::from(Bytes::from_static(b"xyz"));
        assert_eq!(c.chunk(), b"xyz");
        let mut slices = [IoSlice::new(&[]); 4];
        assert_eq!(c.chunks_vectored(&mut slices), 1);
        assert_eq!(Chunk::default().remaining(), 0);
        assert!(Chunk::default().chunk().is_empty());
    }

    #[test]
    fn copy_to_bytes_spans_parts() {
        let mut c = Chunk::parts(Bytes::from_static(b"ab"), Bytes::from_static(b"cd"), Bytes::from_static(b"ef"));
        assert_eq!(c.copy_to_bytes(3), "abc");
        assert_eq!(c.copy_to_bytes(1), "d");
        assert_eq!(c.copy_to_bytes(2), "ef");
        assert!(!c.has_remaining());
    }

    proptest::proptest! {
        #[test]
        fn any_advance_sequence_yields_the_concatenation(
            a in proptest::collection::vec(proptest::num::u8::ANY, 0..8),
            b in proptest::collection::vec(proptest::num::u8::ANY, 0..8),
            c in proptest::collection::vec(proptest::num::u8::ANY, 0..8),
            steps in proptest::collection::vec(1usize..5, 0..30),
        ) {
            let mut chunk = Chunk::parts(Bytes::from(a.clone()), Bytes::from(b.clone()), Bytes::from(c.clone()));
            let whole: Vec<u8> = [a, b, c].concat();
            let mut seen = Vec::new();
            for step in steps {
                let n = step.min(chunk.chunk().len());
                seen.extend_from_slice(&chunk.chunk()[..n]);
                chunk.advance(n);
                proptest::prop_assert_eq!(chunk.remaining(), whole.len() - seen.len());
            }
            seen.extend(drain(chunk));
            proptest::prop_assert_eq!(seen, whole);
        }
    }
}
