//! The index's document ids: ordinal -> id (`ids.txt`, one per line, in corpus order), plus each
//! ordinal's rank in byte-wise id order, so ties are broken by id without string comparisons.

use std::path::Path;

use crate::error::{Error, Result, Setting};

/// Ordinal -> document id, with the tie-break rank of each ordinal.
#[derive(Debug, Clone, Default)]
pub struct DocIds {
    ids: Vec<String>,
    rank: Vec<u32>,
    /// Whether any ordinal is removed (lets [`TopK`] skip the per-candidate check).
    any_removed: bool,
}

impl DocIds {
    /// From ids in ordinal order. Duplicates are an error naming up to five of them; so is an
    /// empty id.
    pub fn new(ids: Vec<String>) -> Result<Self> {
        Self::build(ids, false)
    }

    /// Like [`DocIds::new`], but an empty id marks a removed ordinal (after a refresh).
    pub fn with_removed(ids: Vec<String>) -> Result<Self> {
        Self::build(ids, true)
    }

    fn build(ids: Vec<String>, allow_removed: bool) -> Result<Self> {
        if u32::try_from(ids.len()).is_err() {
            return Err(Error::invalid(Setting::Corpus, "more than 2^32 documents"));
        }
        if let Some((i, id)) = ids
            .iter()
            .enumerate()
            .find(|(_, id)| (id.is_empty() && !allow_removed) || id.contains(['\n', '\r']))
        {
            return Err(Error::invalid(
                Setting::Corpus,
                format!(
                    "document {} has an empty id or one with a line break: {id:?}",
                    i + 1
                ),
            ));
        }
        let mut order: Vec<u32> = (0..ids.len() as u32).collect();
        order.sort_unstable_by(|&a, &b| ids[a as usize].cmp(&ids[b as usize]));
        let duplicates: Vec<&str> = order
            .windows(2)
            .filter(|w| !ids[w[0] as usize].is_empty() && ids[w[0] as usize] == ids[w[1] as usize])
            .map(|w| ids[w[0] as usize].as_str())
            .collect();
        if !duplicates.is_empty() {
            let mut shown: Vec<&str> = duplicates.clone();
            shown.dedup();
            let count = shown.len();
            shown.truncate(5);
            return Err(Error::invalid(
                Setting::Corpus,
                format!(
                    "{count} duplicate document id(s): {}",
                    shown
                        .iter()
                        .map(|id| format!("{id:?}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        let mut rank = vec![0u32; ids.len()];
        for (r, &ord) in order.iter().enumerate() {
            rank[ord as usize] = r as u32;
        }
        let any_removed = ids.iter().any(String::is_empty);
        Ok(Self {
            ids,
            rank,
            any_removed,
        })
    }

    /// Reads `ids.txt` (empty lines are removed ordinals).
    pub fn read(path: &Path) -> Result<Self> {
        let text =
            crate::dataset::bounded::read_line_string(path).map_err(|e| Error::io(path, e))?;
        let ids = text.lines().map(str::to_string).collect();
        Self::with_removed(ids).map_err(|e| Error::index(path, format!("corrupt id list: {e}")))
    }

    /// Writes `ids.txt` (one id per line); ids with a line break are refused.
    pub fn write(&self, path: &Path) -> Result<()> {
        use std::io::Write;
        let mut out = crate::dataset::AtomicWriter::create(path)?;
        for id in &self.ids {
            writeln!(out, "{id}").map_err(|e| Error::io(path, e))?;
        }
        out.commit()
    }

    /// Marks ordinal `ord` removed (its id becomes empty).
    pub fn remove(&mut self, ord: u32) {
        if let Some(id) = self.ids.get_mut(ord as usize) {
            id.clear();
            self.any_removed = true;
        }
    }

    /// Appends `id` as a new ordinal, returning it (the caller ensures it is new). Tie-break
    /// ranks are recomputed by [`DocIds::reindexed`].
    pub fn push(&mut self, id: String) -> u32 {
        self.ids.push(id);
        (self.ids.len() - 1) as u32
    }

    /// Recomputes the tie-break ranks after [`DocIds::push`] / [`DocIds::remove`].
    pub fn reindexed(self) -> Result<Self> {
        Self::with_removed(self.ids)
    }

    /// Whether ordinal `ord` was removed by a refresh.
    pub fn is_removed(&self, ord: u32) -> bool {
        self.any_removed && self.ids.get(ord as usize).is_none_or(String::is_empty)
    }

    /// Ordinals that are not removed.
    pub fn num_live(&self) -> usize {
        self.ids.iter().filter(|id| !id.is_empty()).count()
    }

    /// Number of ordinals (removed ones included).
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// True when there are no documents.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The id of ordinal `ord`.
    pub fn id(&self, ord: u32) -> &str {
        self.ids.get(ord as usize).map_or("", String::as_str)
    }

    /// All ids in ordinal order.
    pub fn ids(&self) -> &[String] {
        &self.ids
    }

    /// Ordinal `ord`'s position in byte-wise id order (the tie-break key).
    pub fn rank(&self, ord: u32) -> u32 {
        self.rank.get(ord as usize).copied().unwrap_or(u32::MAX)
    }
}

/// Keeps the best `k` of a stream of `(ordinal, score)`, ordered by score descending then id
/// ascending (via [`DocIds::rank`]): the same result whatever order candidates arrive in.
pub struct TopK<'a> {
    k: usize,
    ids: &'a DocIds,
    items: Vec<(u32, f32)>,
}

impl<'a> TopK<'a> {
    /// An empty collector for the best `k`.
    pub fn new(k: usize, ids: &'a DocIds) -> Self {
        Self {
            k,
            ids,
            items: Vec::with_capacity(k.saturating_mul(2).min(1 << 16)),
        }
    }

    fn order(&self, a: &(u32, f32), b: &(u32, f32)) -> std::cmp::Ordering {
        b.1.total_cmp(&a.1)
            .then_with(|| self.ids.rank(a.0).cmp(&self.ids.rank(b.0)))
    }

    /// Offers one candidate (a removed ordinal is ignored).
    pub fn push(&mut self, ord: u32, score: f32) {
        if self.k == 0 || self.ids.is_removed(ord) {
            return;
        }
        self.items.push((ord, score));
        // Amortised selection: shrink back to k whenever the buffer doubles.
        if self.items.len() >= self.k.saturating_mul(2).max(1024) {
            self.truncate();
        }
    }

    fn truncate(&mut self) {
        if self.items.len() > self.k {
            let mut items = std::mem::take(&mut self.items);
            items.select_nth_unstable_by(self.k - 1, |a, b| self.order(a, b));
            items.truncate(self.k);
            self.items = items;
        }
    }

    /// Merges another collector's candidates in.
    pub fn extend(&mut self, other: TopK<'_>) {
        for (ord, score) in other.items {
            self.push(ord, score);
        }
    }

    /// The best `k`, best first.
    pub fn into_sorted(mut self) -> Vec<(u32, f32)> {
        self.truncate();
        let mut items = std::mem::take(&mut self.items);
        items.sort_unstable_by(|a, b| self.order(a, b));
        items
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duplicates_are_named() {
        let err = DocIds::new(vec!["a".into(), "b".into(), "a".into()])
            .unwrap_err()
            .to_string();
        assert!(err.contains("\"a\""), "{err}");
    }

    #[test]
    fn top_k_breaks_ties_by_id() {
        let ids = DocIds::new(vec!["c".into(), "a".into(), "b".into(), "d".into()]).unwrap();
        let mut top = TopK::new(3, &ids);
        for (ord, score) in [(0, 1.0), (1, 1.0), (2, 2.0), (3, 0.5)] {
            top.push(ord, score);
        }
        assert_eq!(top.into_sorted(), [(2, 2.0), (1, 1.0), (0, 1.0)]);
    }

    #[test]
    fn top_k_many_candidates() {
        let ids = DocIds::new((0..5000).map(|i| format!("{i:05}")).collect()).unwrap();
        let mut top = TopK::new(10, &ids);
        for ord in (0..5000u32).rev() {
            top.push(ord, (ord % 100) as f32);
        }
        let got = top.into_sorted();
        assert_eq!(got.len(), 10);
        assert_eq!(got[0], (99, 99.0));
        assert_eq!(got[1], (199, 99.0));
    }
}
