//! The one report shape of the tools that count what they find or do (check's findings,
//! repair's changes): a kind, counted, with its first places ([`Counted`], [`Place`]), and the
//! one collector that counts them as they come ([`Tally`]).

use std::collections::HashMap;
use std::hash::Hash;

/// Where something was found or done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Place {
    /// Byte offset in the decompressed JSON; `None` for what happened at no one place (a
    /// lane repair added).
    pub(crate) offset: Option<u64>,
    /// Index in `traceEvents`, when inside it.
    pub(crate) index: Option<u64>,
    pub(crate) message: String,
}

/// A kind of report: its sentence for a count.
pub(crate) trait ReportKind: Copy + Eq + Hash + Ord {
    /// What `count` of this kind mean, in a sentence.
    fn describe(self, count: u64) -> String;
}

/// One kind, counted, with its first places in the order they came; `extra` holds what a
/// tool says more of one kind (check's overlapping slices: the worst threads).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Counted<K, X = ()> {
    pub(crate) kind: K,
    pub(crate) count: u64,
    /// What it means, from the kind and the count.
    pub(crate) message: String,
    /// The first ones, at most the collector's cap.
    pub(crate) examples: Vec<Place>,
    pub(crate) extra: X,
}

/// Counts per kind and the first `cap` places of each, as they come.
#[derive(Debug)]
pub(crate) struct Tally<K> {
    cap: usize,
    map: HashMap<K, (u64, Vec<Place>)>,
}

impl<K: ReportKind> Tally<K> {
    pub(crate) fn new(cap: usize) -> Self {
        Tally {
            cap,
            map: HashMap::new(),
        }
    }

    /// `n` of `kind`, the first at `offset` (event `index`); `message` is made only when the
    /// place is kept.
    pub(crate) fn add(
        &mut self,
        kind: K,
        n: u64,
        offset: u64,
        index: Option<u64>,
        message: impl FnOnce() -> String,
    ) {
        self.count(kind, n);
        self.place(kind, Some(offset), index, message);
    }

    /// `n` of `kind`, placed elsewhere or nowhere.
    pub(crate) fn count(&mut self, kind: K, n: u64) {
        self.map.entry(kind).or_default().0 += n;
    }

    /// A place of `kind` (counted elsewhere), kept if among the first `cap`.
    pub(crate) fn place(
        &mut self,
        kind: K,
        offset: Option<u64>,
        index: Option<u64>,
        message: impl FnOnce() -> String,
    ) {
        let entry = self.map.entry(kind).or_default();
        if entry.1.len() < self.cap {
            entry.1.push(Place {
                offset,
                index,
                message: message(),
            });
        }
    }

    /// The reports, in the order of their kinds, each with the default `extra`.
    pub(crate) fn into_list<X: Default>(self) -> Vec<Counted<K, X>> {
        let mut list: Vec<Counted<K, X>> = self
            .map
            .into_iter()
            .map(|(kind, (count, examples))| Counted {
                kind,
                count,
                message: kind.describe(count),
                examples,
                extra: X::default(),
            })
            .collect();
        list.sort_by_key(|c| c.kind);
        list
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
    enum Fruit {
        Apple,
        Pear,
    }

    impl ReportKind for Fruit {
        fn describe(self, count: u64) -> String {
            format!("{count} {self:?}")
        }
    }

    #[test]
    fn counts_all_keeps_the_first_places_and_sorts_by_kind() {
        let mut t = Tally::new(2);
        t.add(Fruit::Pear, 1, 5, Some(0), || "p1".into());
        for i in 0..4u64 {
            t.add(Fruit::Apple, 1, 10 + i, Some(i), || format!("a{i}"));
        }
        t.count(Fruit::Pear, 3);
        t.place(Fruit::Pear, None, None, || "p2".into());
        t.place(Fruit::Pear, None, None, || unreachable!("past the cap"));
        let list: Vec<Counted<Fruit>> = t.into_list();
        assert_eq!(list.len(), 2);
        assert_eq!((list[0].kind, list[0].count), (Fruit::Apple, 4));
        assert_eq!(list[0].message, "4 Apple");
        let firsts: Vec<&str> = list[0]
            .examples
            .iter()
            .map(|p| p.message.as_str())
            .collect();
        assert_eq!(firsts, ["a0", "a1"]);
        assert_eq!((list[1].kind, list[1].count), (Fruit::Pear, 4));
        assert_eq!(
            list[1].examples[1],
            Place {
                offset: None,
                index: None,
                message: "p2".into()
            }
        );
    }
}
