//! Small readers shared by the stored and wire types, written by hand where serde's derive instantiates the same
//! machinery once per type (the Worker's size budget).

use serde::de::{self, Deserializer, Visitor};
use std::fmt;

/// The index in `names` of the unit variant a value names: a string, as serde's derive writes a unit-only enum
/// (an unknown one fails as the derive's does: "unknown variant `x`, expected one of …"). One instance per
/// deserializer, shared by every enum read with [`unit_enum_de`].
pub(crate) fn variant<'de, D: Deserializer<'de>>(d: D, names: &'static [&'static str]) -> Result<usize, D::Error> {
    struct Names(&'static [&'static str]);
    impl Visitor<'_> for Names {
        type Value = usize;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a variant name")
        }
        fn visit_str<E: de::Error>(self, s: &str) -> Result<usize, E> {
            self.0.iter().position(|n| *n == s).ok_or_else(|| E::unknown_variant(s, self.0))
        }
    }
    d.deserialize_str(Names(names))
}

/// `Deserialize` for a unit-only enum (`Copy`), from the names its `Serialize` derive writes, in a list:
/// `unit_enum_de!(RunStatus { "in-progress" => InProgress, … })`.
macro_rules! unit_enum_de {
    ($ty:ident { $($name:literal => $variant:ident),+ $(,)? }) => {
        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<$ty, D::Error> {
                const ALL: &[$ty] = &[$($ty::$variant),+];
                crate::core::wire::variant(d, &[$($name),+]).map(|i| ALL[i])
            }
        }
    };
}
pub(crate) use unit_enum_de;

/// A JSON value's text, compact, as its `Display` writes it, but through the JSON text writer every stored and wire
/// type uses (`serde_json::to_string`): the `Display` of a JSON value is a second writer in the wasm, and its
/// pretty form a third (~1.3 KB gzip of the Worker, where no code but this writes a value's text).
pub(crate) fn json_text(v: &serde_json::Value) -> String {
    // Ignored: a JSON value (its keys are strings) always serialises.
    serde_json::to_string(v).unwrap_or_default()
}

/// Sorts `v` by `cmp`, in place (not stable: every use orders by a key that is unique, or where equal elements
/// may come in any order). A heapsort: O(n log n) at worst, no allocation, and one small instance per use where
/// the standard library's sorts are ~3 KB each (the Worker's size budget; a dozen uses).
pub(crate) fn sort_by<T>(v: &mut [T], mut cmp: impl FnMut(&T, &T) -> std::cmp::Ordering) {
    let mut sift = |v: &mut [T], mut root: usize, end: usize| loop {
        let mut child = 2 * root + 1;
        if child >= end {
            return;
        }
        if child + 1 < end && cmp(&v[child], &v[child + 1]).is_lt() {
            child += 1;
        }
        if cmp(&v[root], &v[child]).is_ge() {
            return;
        }
        v.swap(root, child);
        root = child;
    };
    let n = v.len();
    for root in (0..n / 2).rev() {
        sift(v, root, n);
    }
    for end in (1..n).rev() {
        v.swap(0, end);
        sift(v, 0, end);
    }
}

#[cfg(test)]
mod tests {
    use crate::core::approval::ApprovalStatus;
    use crate::core::checkpoint::RunStatus;
    use crate::core::machine::DriftPolicy;
    use crate::core::transcript::ResultKind;
    use crate::core::wait::{ResolvedBy, WaitKind};
    use serde::de::DeserializeOwned;
    use serde::Serialize;
    use std::fmt::Debug;

    /// Each variant reads back from what `Serialize` writes, from a string and from a JSON value; anything else
    /// is refused.
    fn round_trips<T: Serialize + DeserializeOwned + PartialEq + Debug + Copy>(all: &[T]) {
        for v in all {
            let text = serde_json::to_string(v).unwrap();
            assert_eq!(serde_json::from_str::<T>(&text).unwrap(), *v, "{text}");
            assert_eq!(serde_json::from_value::<T>(serde_json::to_value(v).unwrap()).unwrap(), *v, "{text}");
        }
        let e = serde_json::from_str::<T>("\"no-such\"").unwrap_err().to_string();
        assert!(e.starts_with("unknown variant `no-such`, expected one of"), "{e}");
        assert!(serde_json::from_str::<T>("7").is_err());
        assert!(serde_json::from_str::<T>("null").is_err());
    }

    #[test]
    fn unit_enums_read_what_they_write_and_refuse_anything_else() {
        round_trips(&[RunStatus::InProgress, RunStatus::AwaitingApproval, RunStatus::Finished]);
        round_trips(&[
            ResultKind::Execution,
            ResultKind::Validation,
            ResultKind::Denied,
            ResultKind::Rejected,
            ResultKind::NotRun,
            ResultKind::Cancelled,
            ResultKind::Interrupted,
        ]);
        round_trips(&[
            ResolvedBy::Answer,
            ResolvedBy::Declined,
            ResolvedBy::Delivery,
            ResolvedBy::Deadline,
            ResolvedBy::Timer,
        ]);
        round_trips(&[WaitKind::Approval, WaitKind::Question, WaitKind::Event, WaitKind::Timer]);
        round_trips(&[DriftPolicy::Warn, DriftPolicy::Error, DriftPolicy::Ignore]);
        round_trips(&[ApprovalStatus::Pending, ApprovalStatus::Approved, ApprovalStatus::Rejected]);
    }

    proptest::proptest! {
        /// The heapsort orders as the standard library's sort does.
        #[test]
        fn sort_by_orders_as_the_standard_sort(mut v in proptest::collection::vec((0u8..20, 0u32..1000), 0..200)) {
            let mut expected = v.clone();
            expected.sort();
            super::sort_by(&mut v, |a, b| a.cmp(b));
            proptest::prop_assert_eq!(v, expected);
        }
    }
}
