//! A sort's keys: what `sort_by_key` and `then_by` accept ([`SortKey`]: a value or a tuple
//! of values), each part as an unsigned integer whose order is the part's order, and parts
//! packed side by side into keys of at most 64 bits, one radix sort each.

use super::super::*;

/// What [`Query::sort_by_key`] and [`Sorted::then_by`] sort by: one value (`Val<K>` of a
/// numeric `K`) or a tuple of two to four, compared part by part (the first part decides,
/// and rows whose first parts are equal go by the second, and so on), as Rust compares
/// tuples, floats in IEEE 754 total order (`f32::total_cmp`).
///
/// ```
/// # use kiln::prelude::*;
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let (dept, pay) = ([2u8, 1, 2, 1], [30.0f32, 50.0, 10.0, 40.0]);
/// let rows = ctx.from(&dept).zip(&pay).sort_by_key(|(d, p)| (d, p)).to_vec()?;
/// assert_eq!(rows, [(1, 40.0), (1, 50.0), (2, 10.0), (2, 30.0)]);
/// # Ok::<(), kiln::Error>(())
/// ```
pub trait SortKey {
    /// Appends the type of each part.
    #[doc(hidden)]
    fn part_types(out: &mut Vec<ScalarType>);
    /// Appends the value of each part.
    #[doc(hidden)]
    fn parts(self, out: &mut Vec<AnyVal>);
}

impl<K: Numeric> SortKey for Val<K> {
    fn part_types(out: &mut Vec<ScalarType>) {
        out.push(K::TYPE);
    }
    fn parts(self, out: &mut Vec<AnyVal>) {
        out.push(self.erase());
    }
}

macro_rules! tuple_sort_key {
    ($($k:ident $i:tt),+) => {
        impl<$($k: Numeric),+> SortKey for ($(Val<$k>,)+) {
            fn part_types(out: &mut Vec<ScalarType>) {
                $(out.push($k::TYPE);)+
            }
            fn parts(self, out: &mut Vec<AnyVal>) {
                $(out.push(self.$i.erase());)+
            }
        }
    };
}
tuple_sort_key!(A 0, B 1);
tuple_sort_key!(A 0, B 1, C 2);
tuple_sort_key!(A 0, B 1, C 2, D 3);

/// A key function: the row's column values to the values of the key's parts.
pub(super) type KeyFn<'a> = Box<dyn Fn(Vec<AnyVal>) -> Vec<AnyVal> + 'a>;

/// One key of a sort (`sort_by_key`'s, or a `then_by`'s): its function, the types of its
/// parts and its direction.
pub(super) struct Key<'a> {
    pub key: KeyFn<'a>,
    pub types: Vec<ScalarType>,
    pub desc: bool,
}

/// A part of a sort's keys: its key, its position in the key, its type and direction.
#[derive(Clone, Copy)]
struct Part {
    key: usize,
    at: usize,
    ty: ScalarType,
    desc: bool,
}

/// Every part of `keys`, the first key's first.
fn parts(keys: &[Key<'_>]) -> Vec<Part> {
    keys.iter()
        .enumerate()
        .flat_map(|(key, k)| {
            k.types.iter().enumerate().map(move |(at, &ty)| Part {
                key,
                at,
                ty,
                desc: k.desc,
            })
        })
        .collect()
}

/// Parts `parts` (a range of the sort's parts, first first) packed into one unsigned integer
/// of 32 bits (when they hold at most 32 together) or 64: each part's ordered bits
/// ([`ordered_bits`]), the first part's highest, so the integers' order is the parts' order.
#[derive(Clone, Copy)]
pub(crate) struct Packed<'s, 'a> {
    keys: &'s [Key<'a>],
    parts: (usize, usize),
}

impl Packed<'_, '_> {
    fn parts(&self) -> Vec<Part> {
        parts(self.keys)[self.parts.0..self.parts.1].to_vec()
    }

    /// The bits the packed parts take.
    pub(crate) fn bits(&self) -> u32 {
        self.parts().iter().map(|p| p.ty.bits()).sum()
    }

    /// The packed key of the row `vals`: a `u32` up to 32 bits, a `u64` above. Applies each
    /// key function the parts come from once.
    pub(crate) fn ordered(&self, vals: &[AnyVal]) -> AnyVal {
        let total = self.bits();
        let mut shift = total;
        let mut packed: Option<AnyVal> = None;
        let mut applied: Option<(usize, Vec<AnyVal>)> = None;
        for p in self.parts() {
            if applied.as_ref().map(|a| a.0) != Some(p.key) {
                applied = Some((p.key, (self.keys[p.key].key)(vals.to_vec())));
            }
            let value = &applied.as_ref().expect("applied above").1[p.at];
            let bits = ordered_bits(value, p.ty, p.desc);
            shift -= p.ty.bits();
            let part = match (total > 32, p.ty.bits() > 32) {
                (false, _) if shift == 0 => bits,
                (false, _) => (bits.typed::<u32>() << shift).erase(),
                (true, true) => bits,
                (true, false) => (bits.typed::<u32>().cast::<u64>() << u64::from(shift)).erase(),
            };
            packed = Some(match packed {
                Some(high) => bin(BinaryOp::Or, &high, &part),
                None => part,
            });
        }
        packed.expect("a packed key has a part")
    }
}

/// The radix sorts a sort by `keys` runs, the one by the last parts first: the parts cut,
/// from the last, into runs of at most `max_bits` bits (64 where the device has 64-bit
/// integers, 32 elsewhere; a part wider than that runs alone). Each sort is stable, so the
/// rows end up in the order of the first parts, ties in the order of the next ones.
pub(crate) fn rounds<'s, 'a>(keys: &'s [Key<'a>], max_bits: u32) -> Vec<Packed<'s, 'a>> {
    let widths: Vec<u32> = parts(keys).iter().map(|p| p.ty.bits()).collect();
    let mut rounds = Vec::new();
    let mut end = widths.len();
    while end > 0 {
        let (mut start, mut bits) = (end - 1, widths[end - 1]);
        while start > 0 && bits + widths[start - 1] <= max_bits {
            start -= 1;
            bits += widths[start];
        }
        rounds.push(Packed {
            keys,
            parts: (start, end),
        });
        end = start;
    }
    rounds
}

/// `key` (of type `ty`) as an unsigned integer of 32 bits (keys of up to 4 bytes) or 64 bits
/// whose unsigned order is the key's order, reversed when `desc`: unsigned keys as they are,
/// signed ones with the sign bit flipped, floats with the sign bit flipped when positive and
/// every bit flipped when negative (IEEE 754 total order: -NaN, -inf, ..., -0, +0, ..., +inf,
/// +NaN).
pub(crate) fn ordered_bits(key: &AnyVal, ty: ScalarType, desc: bool) -> AnyVal {
    fn flip_top<U: Int + Copy>(bits: Val<U>, top: U) -> Val<U> {
        bits ^ top
    }
    let bits = ty.bits();
    match bits {
        8..=32 => {
            let top = 1u32 << (bits - 1);
            let b: Val<u32> = match ty {
                ScalarType::U8 => key.typed::<u8>().cast(),
                ScalarType::U16 => key.typed::<u16>().cast(),
                ScalarType::U32 => key.typed::<u32>(),
                ScalarType::I8 => flip_top(key.typed::<i8>().bitcast::<u8>().cast(), top),
                ScalarType::I16 => flip_top(key.typed::<i16>().bitcast::<u16>().cast(), top),
                ScalarType::I32 => flip_top(key.typed::<i32>().bitcast(), top),
                ScalarType::F16 => {
                    let b: Val<u32> = key.typed::<kiln_ir::f16>().bitcast::<u16>().cast();
                    select((b & top).ne(0u32), !b & 0xffffu32, b | top)
                }
                _ => {
                    let b = key.typed::<f32>().bitcast::<u32>();
                    select((b & top).ne(0u32), !b, b | top)
                }
            };
            let mask = (((1u64 << bits) - 1) as u32) * u32::from(desc);
            (b ^ mask).erase()
        }
        _ => {
            let top = 1u64 << 63;
            let b: Val<u64> = match ty {
                ScalarType::U64 => key.typed::<u64>(),
                ScalarType::I64 => flip_top(key.typed::<i64>().bitcast(), top),
                _ => {
                    let b = key.typed::<f64>().bitcast::<u64>();
                    select((b & top).ne(0u64), !b, b | top)
                }
            };
            (b ^ (u64::MAX * u64::from(desc))).erase()
        }
    }
}
