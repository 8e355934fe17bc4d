//! Sums and samples from Prometheus text exposition.

/// The sum of every sample of `name` whose labels include all of `labels`.
pub fn sum(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    samples(text, name)
        .into_iter()
        .filter(|(l, _)| labels.iter().all(|(k, v)| l.contains(&format!("{k}=\"{v}\""))))
        .map(|(_, v)| v)
        .sum()
}

/// Every sample of `name`: its label set (braces kept) and value.
pub fn samples(text: &str, name: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(name)?;
            if !(rest.starts_with('{') || rest.starts_with(' ')) {
                return None;
            }
            let i = rest.rfind(' ')?;
            Some((rest[..i].trim().to_owned(), rest[i + 1..].parse().ok()?))
        })
        .collect()
}

/// The value of one label in a label set such as `{verb="LIST",code="200"}`.
pub fn label<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    let pat = format!("{key}=\"");
    let at = labels.find(&pat)? + pat.len();
    let end = labels[at..].find('"')?;
    Some(&labels[at..at + end])
}

/// `name`'s samples summed by the value of `key`, sorted by that value.
pub fn by_label(text: &str, name: &str, key: &str, filter: &[(&str, &str)]) -> Vec<(String, f64)> {
    let mut out: Vec<(String, f64)> = Vec::new();
    for (l, v) in samples(text, name) {
        if !filter.iter().all(|(k, fv)| l.contains(&format!("{k}=\"{fv}\""))) {
            continue;
        }
        let k = label(&l, key).unwrap_or("").to_owned();
        match out.iter_mut().find(|(x, _)| *x == k) {
            Some(e) => e.1 += v,
            None => out.push((k, v)),
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// `after - before` per key (keys of either).
pub fn delta(before: &[(String, f64)], after: &[(String, f64)]) -> Vec<(String, f64)> {
    let mut out: Vec<(String, f64)> = after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.iter().find(|(b, _)| b == k).map_or(0.0, |(_, v)| *v)))
        .collect();
    for (k, v) in before {
        if !after.iter().any(|(a, _)| a == k) {
            out.push((k.clone(), -v));
        }
    }
    out.retain(|(_, v)| *v != 0.0);
    out
}

/// A histogram's change between two scrapes, by stage: `q` quantiles of the
/// observations made in between, from the `_bucket` counts as Prometheus'
/// `histogram_quantile` reads them (linear inside a bucket), and how many
/// there were. `None` when there were none.
pub fn histogram_delta_quantiles(
    before: &str,
    after: &str,
    name: &str,
    labels: &[(&str, &str)],
    qs: &[f64],
) -> Option<(f64, Vec<f64>)> {
    let bucket = format!("{name}_bucket");
    let by_le = |text: &str| -> Vec<(f64, f64)> {
        let mut v: Vec<(f64, f64)> = samples(text, &bucket)
            .into_iter()
            .filter(|(l, _)| labels.iter().all(|(k, v)| l.contains(&format!("{k}=\"{v}\""))))
            .filter_map(|(l, v)| {
                let le = label(&l, "le")?;
                let le = if le == "+Inf" { f64::INFINITY } else { le.parse().ok()? };
                Some((le, v))
            })
            .collect();
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        v
    };
    let b = by_le(before);
    let a = by_le(after);
    let cum: Vec<(f64, f64)> =
        a.iter().map(|&(le, v)| (le, v - b.iter().find(|(x, _)| *x == le).map_or(0.0, |(_, w)| *w))).collect();
    let total = cum.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let quantile = |q: f64| {
        let rank = q * total;
        let mut prev = (0.0, 0.0);
        for &(le, c) in &cum {
            if c >= rank {
                if le.is_infinite() {
                    return prev.0;
                }
                let width = c - prev.1;
                return if width > 0.0 { prev.0 + (le - prev.0) * (rank - prev.1) / width } else { le };
            }
            prev = (le, c);
        }
        prev.0
    };
    Some((total, qs.iter().map(|&q| quantile(q)).collect()))
}
