//! A LIST's walk through its snapshot: which objects it visits (one node's
//! from the node index, one namespace's key range, or all), whether those
//! candidates are already exactly the matches, and a list body (JSON or
//! protobuf) streamed from the snapshot batch by batch.
//!
//! The walk owns its snapshot (an O(1) clone of shared structure) and where
//! it stands, so it can stop and resume: a body that stops when hyper has
//! no room for more and resumes from the last key it sent holds one batch at
//! a time, not the whole list. A LIST of a million objects gathered before
//! its headers held every item's chunk (a tenth of the list's size again)
//! and sent its first byte only once the last item was placed.

use std::collections::VecDeque;
use std::ops::Bound;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use crate::body::{BoxError, Chunk};
use crate::cache::delivery::filter::{Filter, NODE_FIELD};
use crate::cache::state::object::{CachedObject, NoProtobuf, ObjectKey};
use crate::cache::state::store::Snapshot;
use crate::encode::list::{Frames, ListItems};
use crate::encode::protobuf::ListLayout;
use crate::encode::variant::ContentVariant;
use crate::selector::field::FieldOp;

/// Where a page starts in its snapshot.
pub(super) struct PageStart {
    pub(super) after: ObjectKey,
    pub(super) exclusive: bool,
}

/// The objects a LIST visits, from where it stands.
pub(super) struct Walk {
    snapshot: Snapshot,
    /// The node whose objects the walk follows in the node index.
    node: Option<String>,
    /// The namespace whose key range the walk covers.
    namespace: Option<String>,
    /// Where the walk resumes.
    lower: Bound<ObjectKey>,
    /// The filter each candidate must pass; none when the candidates are
    /// exactly what it selects (a kubelet's `spec.nodeName=` LIST: checking
    /// each pod the node index chose again was a fifth of such a LIST).
    check: Option<Filter>,
}

impl Walk {
    pub(super) fn new(snapshot: Snapshot, filter: &Filter, namespaced: bool, start: Option<&PageStart>) -> Self {
        let namespace = filter.namespace.clone().filter(|_| namespaced);
        let node = filter.fields.exact(NODE_FIELD).filter(|n| !n.is_empty()).map(str::to_owned);
        let lower = match start {
            Some(s) if s.exclusive => Bound::Excluded(s.after.clone()),
            Some(s) => Bound::Included(s.after.clone()),
            None => Bound::Unbounded,
        };
        let check = (!candidates_decide(filter, namespace.as_deref(), node.as_deref())).then(|| filter.clone());
        Self { snapshot, node, namespace, lower, check }
    }

    /// The objects the filter selects, in key order, from where the walk stands.
    pub(super) fn matching(&self) -> impl Iterator<Item = (&ObjectKey, &Arc<CachedObject>)> + Send + '_ {
        self.snapshot
            .candidates(self.node.as_deref(), self.namespace.as_deref(), self.lower.as_ref())
            .filter(|(_, obj)| self.check.as_ref().is_none_or(|filter| filter.matches(obj)))
    }

    /// Moves the walk past `key`.
    fn resume_after(&mut self, key: ObjectKey) {
        self.lower = Bound::Excluded(key);
    }
}

/// Whether the candidates a walk visits (`node`'s objects in the index,
/// `namespace`'s key range) are exactly what `filter` selects: no name, no
/// labels, the namespace the walk covers, and no field requirement but the
/// node the index is keyed by. Conservative: false whenever in doubt.
fn candidates_decide(filter: &Filter, namespace: Option<&str>, node: Option<&str>) -> bool {
    filter.name.is_none()
        && filter.labels.is_empty()
        && filter.namespace.as_deref() == namespace
        && filter.fields.requirements().iter().all(|r| {
            r.op == FieldOp::Eq && r.field == NODE_FIELD && !r.value.is_empty() && Some(r.value.as_str()) == node
        })
}

/// The items of a list body, streamed from a [`Walk`] a batch at a time,
/// then the list's closing bytes: in JSON each item behind a comma (none
/// before the first); in protobuf each behind its field's key and length,
/// the lengths summed by a first walk for the head ([`ListStream::protobuf`]).
pub(super) struct ListStream {
    walk: Walk,
    variant: ContentVariant,
    /// Items of a built-in kind's list leave out their type meta.
    builtin: bool,
    /// The head, items gathered and not yet sent, and at the end the close.
    queued: VecDeque<Chunk>,
    /// Items as they are gathered, in the list's form.
    form: ItemForm,
    /// The walk reached the snapshot's end.
    walked: bool,
    /// Sent after the last item.
    close: Option<Bytes>,
    /// Bytes in `queued` and `close`: at least what the body has still to
    /// send (its size hint's lower bound, by which a streamed list over
    /// 128 KiB is compressed as the API server compresses it); in protobuf
    /// exactly what it has still to send.
    pending: u64,
}

/// How the items of a list are written.
enum ItemForm {
    /// Each after its comma but the first.
    Json(ListItems),
    /// Each behind its field's key and length; `left` is what the head
    /// announced of the items' bytes and has not been written yet.
    Protobuf { frames: Frames, layout: ListLayout, left: usize },
}

/// An item's protobuf form changed between the walk that measured the list
/// and the one that writes it (an upgrade of the upstream's minor, whose
/// form is made for each read where the kind is written differently): the
/// body cannot be what its head announced, and ends with an error.
const CHANGED: NoProtobuf = NoProtobuf { reason: "an item's protobuf form changed while its list was streamed" };

impl ItemForm {
    fn bytes(&self) -> usize {
        match self {
            Self::Json(items) => items.bytes(),
            Self::Protobuf { frames, .. } => frames.bytes(),
        }
    }

    fn push(&mut self, item: [Bytes; 2]) -> Result<(), NoProtobuf> {
        match self {
            Self::Json(items) => items.push(item),
            Self::Protobuf { frames, layout, left } => {
                let [message, _] = item;
                let prefix = layout.item_prefix(message.len());
                *left = left.checked_sub(prefix.len() + message.len()).ok_or(CHANGED)?;
                frames.push(&prefix, message, Bytes::new());
            }
        }
        Ok(())
    }

    fn take(&mut self) -> VecDeque<Chunk> {
        match self {
            Self::Json(items) => items.take(),
            Self::Protobuf { frames, .. } => frames.take(),
        }
    }
}

/// Bytes of items a streamed list gathers at once: one walk of the snapshot
/// from the last key sent, a few hundred items of a kilobyte.
const BATCH_BYTES: usize = 256 * 1024;

impl ListStream {
    /// A JSON list's items.
    pub(super) fn new(walk: Walk, variant: ContentVariant, builtin: bool) -> Self {
        debug_assert!(!variant.is_protobuf(), "a protobuf list's head holds its items' lengths");
        Self::of(walk, variant, builtin, ItemForm::Json(ListItems::default()))
    }

    /// A protobuf list's items, `items_len` bytes of them with their keys
    /// and lengths as `layout`'s head announced.
    pub(super) fn protobuf(
        walk: Walk,
        variant: ContentVariant,
        builtin: bool,
        layout: ListLayout,
        items_len: usize,
    ) -> Self {
        debug_assert!(variant.is_protobuf());
        let mut stream =
            Self::of(walk, variant, builtin, ItemForm::Protobuf { frames: Frames::default(), layout, left: items_len });
        // Known in advance, to the byte.
        stream.pending = items_len as u64;
        stream
    }

    fn of(walk: Walk, variant: ContentVariant, builtin: bool, form: ItemForm) -> Self {
        Self { walk, variant, builtin, queued: VecDeque::new(), form, walked: false, close: None, pending: 0 }
    }

    /// Gathers items until `budget` bytes of them are queued or the walk
    /// ends; returns whether it ended.
    pub(super) fn gather(&mut self, budget: usize) -> Result<bool, NoProtobuf> {
        let Self { walk, variant, builtin, queued, form, walked, pending, .. } = self;
        let before = form.bytes();
        let mut last = None;
        let mut ended = true;
        for (key, obj) in walk.matching() {
            if form.bytes() - before >= budget {
                ended = false;
                break;
            }
            form.push(obj.list_item(*variant, *builtin)?)?;
            last = Some(key);
        }
        if let Some(key) = last.cloned() {
            walk.resume_after(key);
        }
        if ended && matches!(form, ItemForm::Protobuf { left, .. } if *left != 0) {
            return Err(CHANGED);
        }
        *walked = ended;
        if let ItemForm::Json(_) = form {
            *pending += (form.bytes() - before) as u64;
        }
        queued.extend(form.take());
        Ok(ended)
    }

    /// Whether an item was placed.
    pub(super) fn placed_any(&self) -> bool {
        match &self.form {
            ItemForm::Json(items) => items.placed_any(),
            ItemForm::Protobuf { frames, .. } => frames.bytes() > 0,
        }
    }

    /// The gathered items, once the walk has ended.
    pub(super) fn into_gathered(self) -> VecDeque<Chunk> {
        debug_assert!(self.walked, "gathered only once the walk ended");
        self.queued
    }

    /// Streams what is left after `head`, then `close`.
    pub(super) fn after(mut self, head: Bytes, close: Bytes) -> Self {
        self.pending += (head.len() + close.len()) as u64;
        self.queued.push_front(Chunk::from(head));
        self.close = Some(close);
        self
    }
}

impl Body for ListStream {
    type Data = Chunk;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Chunk>, BoxError>>> {
        let this = self.get_mut();
        if this.queued.is_empty()
            && !this.walked
            && let Err(refused) = this.gather(BATCH_BYTES)
        {
            // Only protobuf variants refuse, and they are never streamed.
            return Poll::Ready(Some(Err(
                format!("list item has no {:?} form: {}", this.variant, refused.reason).into()
            )));
        }
        let next = this.queued.pop_front().or_else(|| this.close.take().map(Chunk::from));
        if let Some(chunk) = &next {
            use bytes::Buf;
            this.pending -= chunk.remaining() as u64;
        }
        Poll::Ready(next.map(|chunk| Ok(Frame::data(chunk))))
    }

    fn is_end_stream(&self) -> bool {
        self.walked && self.queued.is_empty() && self.close.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        match self.form {
            // Its head announced its length.
            ItemForm::Protobuf { .. } => SizeHint::with_exact(self.pending),
            ItemForm::Json(_) => {
                let mut hint = SizeHint::new();
                hint.set_lower(self.pending);
                hint
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::selector::{FieldSelector, LabelSelector};

    fn filter(namespace: Option<&str>, labels: &str, fields: &str) -> Filter {
        Filter::new(
            namespace.map(str::to_owned),
            None,
            LabelSelector::parse(labels).unwrap(),
            FieldSelector::parse(fields).unwrap(),
        )
    }

    #[test]
    fn candidates_decide_only_a_bare_node_or_namespace_walk() {
        let node = Some("n1");
        assert!(candidates_decide(&filter(None, "", ""), None, None), "everything");
        assert!(candidates_decide(&filter(Some("ns"), "", ""), Some("ns"), None), "one namespace");
        assert!(candidates_decide(&filter(None, "", "spec.nodeName=n1"), None, node), "a kubelet's LIST");
        assert!(candidates_decide(&filter(Some("ns"), "", "spec.nodeName=n1"), Some("ns"), node));
        for (f, namespace, node, why) in [
            (filter(None, "app=x", "spec.nodeName=n1"), None, node, "labels"),
            (filter(None, "", "spec.nodeName=n1,status.phase=Running"), None, node, "another field"),
            (filter(None, "", "spec.nodeName=n1,spec.nodeName=n2"), None, node, "a second node"),
            (filter(None, "", "spec.nodeName!=n1"), None, None, "not a node"),
            (filter(None, "", "spec.nodeName="), None, None, "the unscheduled pods: not in the index"),
            (filter(Some("ns"), "", ""), None, None, "a namespace the walk does not cover (cluster-scoped)"),
            (filter(None, "", "metadata.namespace=ns"), Some("ns"), None, "a namespace by field"),
            (filter(None, "", "metadata.name=a"), None, None, "a name"),
        ] {
            assert!(!candidates_decide(&f, namespace, node), "{why}");
        }
    }

    #[test]
    fn a_protobuf_item_longer_or_shorter_than_measured_ends_the_list_with_an_error() {
        let measured = [Bytes::from_static(b"abc"), Bytes::from_static(b"de")];
        let lens: Vec<usize> = measured.iter().map(Bytes::len).collect();
        let layout = || ListLayout::new("v1", "ConfigMapList", br#"{"resourceVersion":"7"}"#, &lens).unwrap();
        let items_len: usize = lens.iter().map(|&len| layout().item_prefix(len).len() + len).sum();
        let form = || ItemForm::Protobuf { frames: Frames::default(), layout: layout(), left: items_len };

        let mut same = form();
        for item in &measured {
            same.push([item.clone(), Bytes::new()]).unwrap();
        }
        assert!(matches!(same, ItemForm::Protobuf { left: 0, .. }), "as measured: nothing left");

        let mut longer = form();
        longer.push([Bytes::from_static(b"abc"), Bytes::new()]).unwrap();
        assert_eq!(longer.push([Bytes::from_static(b"defgh"), Bytes::new()]), Err(CHANGED));

        let mut shorter = form();
        shorter.push([Bytes::from_static(b"ab"), Bytes::new()]).unwrap();
        shorter.push([Bytes::from_static(b"d"), Bytes::new()]).unwrap();
        assert!(matches!(shorter, ItemForm::Protobuf { left, .. } if left > 0), "gather ends it with CHANGED");
    }
}
