//! `top_k(k)` and `bottom_k(k)`: the `k` largest or smallest elements without sorting them
//! all (a radix select). Each element's rank is its ordered bits (see `sort`'s
//! `ordered_bits`), flipped for `top_k`, so the wanted elements are the `k` of smallest rank.
//!
//! 1. The query's elements are written to a device column once.
//! 2. One pass per byte of the rank, highest first, counts the bytes of the elements whose
//!    higher bytes equal those already chosen (a histogram of 256 bins, its filter fused):
//!    the byte where the running count reaches the `k`-th element is chosen. After the last
//!    byte the rank `t` of the `k`-th element is known, and how many elements of rank `t`
//!    the answer takes; a byte whose elements complete the `k` exactly ends the passes
//!    early (the answer is then every element of rank below the next byte's).
//! 3. The elements of rank below `t` (fewer than `k`) are sorted; the element of rank `t`
//!    (elements of one rank are equal, bit for bit: its value is the rank's bits undone)
//!    fills the rest.
//!
//! The passes' bytes and masks are constants of user code, so after the second pass they are
//! kernel parameters and every later pass and call reuses the compiled kernels.

use super::*;
use crate::query::sort::ordered_bits;

impl<'a, T: Numeric + Row<Vals = Val<T>>> Query<'a, T> {
    /// The `k` largest elements (of those the filters keep), largest first; all of them,
    /// sorted, when there are fewer. Floats in IEEE 754 total order, as [`Query::sort_desc`]
    /// orders them (NaN largest, then +inf, ..., +0 before -0). No full sort: one pass per
    /// byte of the element counts the candidates, and only the elements above the `k`-th are
    /// sorted. Fails as the query's other terminals do.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let xs = [4i32, -7, 19, 4, 0, 11, 4];
    /// assert_eq!(ctx.from(&xs).top_k(3)?, [19, 11, 4]);
    /// assert_eq!(ctx.from(&xs).filter(|x| x.lt(10)).top_k(9)?, [4, 4, 4, 0, -7]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn top_k(self, k: usize) -> Result<Vec<T>> {
        self.extreme_k(k, true)
    }

    /// The `k` smallest elements, smallest first; see [`Query::top_k`].
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let xs = [2.5f32, -1.0, 8.0, -0.0, 0.0, -1.0];
    /// assert_eq!(ctx.from(&xs).bottom_k(3)?, [-1.0, -1.0, -0.0]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn bottom_k(self, k: usize) -> Result<Vec<T>> {
        self.extreme_k(k, false)
    }

    /// The `k` elements of smallest rank (see the module), `top` flipping the order.
    fn extreme_k(mut self, k: usize, top: bool) -> Result<Vec<T>> {
        let _span = self.plan_span(if top { "top_k" } else { "bottom_k" });
        self.check()?;
        let (cols, n) = self.materialize()?;
        let ctx = self.ctx.clone();
        let column: [&dyn DeviceMemory; 1] = [&*cols[0]];
        let elements = || Query::<T>::over_device(&ctx, &column, n);
        let k = k.min(n);
        if k == n {
            let all = elements();
            return if top { all.sort_desc() } else { all.sort() }.to_vec();
        }
        if k == 0 {
            return Ok(Vec::new());
        }
        let bits = T::TYPE.bits();
        let (threshold, ties) = select_rank(bits, k, |mask, prefix, shift| {
            elements()
                .filter(move |x| rank_of(x, top).and_mask_eq(mask, prefix))
                .map(move |x| rank_of(x, top).byte_at(shift))
                .histogram(256)
        })?;
        let below = elements().filter(move |x| rank_of(x, top).below(threshold));
        let mut out = if top { below.sort_desc() } else { below.sort() }.to_vec()?;
        if ties > 0 {
            let at = value_of_rank(threshold, T::TYPE, top);
            out.extend(std::iter::repeat_n(
                T::from_values(&mut std::iter::once(at)),
                ties,
            ));
        }
        Ok(out)
    }
}

/// The rank `t` below which the answer takes every element, and how many elements of rank
/// `t` it takes besides (`k` of them in all): one pass per byte, highest first, with
/// `histogram(mask, prefix, shift)` counting byte `shift` of the ranks whose bits under
/// `mask` equal `prefix`. A byte whose elements complete the `k` ends the passes early. Fails
/// as `histogram` does.
fn select_rank(
    bits: u32,
    k: usize,
    histogram: impl Fn(u64, u64, u32) -> Result<Vec<u32>>,
) -> Result<(u64, usize)> {
    let (mut mask, mut prefix, mut need) = (0u64, 0u64, k as u64);
    for shift in (0..bits).step_by(8).rev() {
        let counts = histogram(mask, prefix, shift)?;
        let mut before = 0u64;
        let mut chosen = 255u64;
        for (byte, &c) in counts.iter().enumerate() {
            if before + c as u64 >= need {
                chosen = byte as u64;
                break;
            }
            before += c as u64;
        }
        need -= before;
        mask |= 255 << shift;
        prefix |= chosen << shift;
        if counts[chosen as usize] as u64 == need {
            // Every element of this byte is taken: the next byte's elements are the first
            // the answer leaves out (k < n, so there is one).
            return Ok((prefix.wrapping_add(1 << shift), 0));
        }
    }
    Ok((prefix, need as usize))
}

/// The value of type `ty` whose rank is `rank`: `ordered_bits` undone on the host.
fn value_of_rank(rank: u64, ty: ScalarType, top: bool) -> ScalarValue {
    let bits = ty.bits();
    let width = match bits {
        64 => u64::MAX,
        b => (1u64 << b) - 1,
    };
    let sign = 1u64 << (bits - 1);
    let ordered = match top {
        true => rank ^ width,
        false => rank,
    };
    let raw = match ty {
        _ if ty.is_float() && ordered & sign != 0 => ordered ^ sign,
        _ if ty.is_float() => !ordered & width,
        _ if ty.is_signed() => ordered ^ sign,
        _ => ordered,
    };
    ScalarValue::from_bits(ty, raw)
}

/// An element's rank (its ordered bits, flipped when `top`): `u32` up to 32 bits, `u64`
/// above.
fn rank_of<T: Numeric>(x: Val<T>, top: bool) -> Rank {
    Rank {
        bits: ordered_bits(&x.erase(), T::TYPE, top),
        wide: T::TYPE.bits() > 32,
    }
}

/// A rank in the IR, with the comparisons the passes need.
struct Rank {
    bits: AnyVal,
    wide: bool,
}

impl Rank {
    /// The constant `v` in the rank's type.
    fn constant(&self, v: u64) -> AnyVal {
        match self.wide {
            true => lit_value(ScalarValue::U64(v)),
            false => lit_value(ScalarValue::U32(v as u32)),
        }
    }

    /// True when the rank's bits under `mask` equal `prefix`.
    fn and_mask_eq(&self, mask: u64, prefix: u64) -> Val<bool> {
        let masked = bin(BinaryOp::And, &self.bits, &self.constant(mask));
        bin(BinaryOp::Eq, &masked, &self.constant(prefix)).typed()
    }

    /// True when the rank is below `t`.
    fn below(&self, t: u64) -> Val<bool> {
        bin(BinaryOp::Lt, &self.bits, &self.constant(t)).typed()
    }

    /// Byte `shift / 8` of the rank, as a `u32`.
    fn byte_at(&self, shift: u32) -> Val<u32> {
        match self.wide {
            true => ((self.bits.typed::<u64>() >> u64::from(shift)) & 255u64).cast(),
            false => (self.bits.typed::<u32>() >> shift) & 255u32,
        }
    }
}
