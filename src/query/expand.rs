//! `flat_map` with a bounded count: every element stands for `max` rows, the `j`-th of
//! which is kept when `j` is below the element's count. The rows are positions of a larger
//! index space (`len * max`), so the fused element function, the filters' count, scan and
//! scatter and every terminal run unchanged over it; the stages before the expansion read
//! their element at the position divided by `max` ([`Query::row_at`]).

use super::{Query, Stage, MAX_LEN};
use crate::error::Error;
use crate::row::{IntoRow, Row};
use kiln_ir::*;

impl<'a, T: Row> Query<'a, T> {
    /// Each element `x` yields `count(x)` rows (a `Val<u32>` or a `u32`), at most `max` (a larger count is cut to
    /// `max`): `f(x, 0)`, `f(x, 1)`, ..., in order, as
    /// `flat_map(|x| (0..count(x).min(max)).map(|j| f(x, j)))` does on an iterator (LINQ
    /// `SelectMany`). The kernels run `f` and the count over `len * max` positions and keep
    /// those below the count, like a filter; so `enumerate`, `zip`, `reverse`, `take` and
    /// `skip` after it count the rows kept (the query so far runs first, as after a
    /// filter). Fails at the terminal with `TooLarge` when `len * max` exceeds
    /// [`crate::MAX_LEN`].
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let xs = [3u32, 0, 1, 7];
    /// // Each x yields x % 4 rows, 10 * x + j for j in 0..x % 4.
    /// let rows = ctx.from(&xs).flat_map(3, |x| x % 4u32, |x, j| x * 10u32 + j).to_vec()?;
    /// let rust: Vec<u32> = xs
    ///     .iter()
    ///     .flat_map(|x| (0..(x % 4).min(3)).map(move |j| x * 10 + j))
    ///     .collect();
    /// assert_eq!(rows, rust);
    /// assert_eq!(rows, [30, 31, 32, 10, 70, 71, 72]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn flat_map<O, N, C, F>(mut self, max: u32, count: C, f: F) -> Query<'a, O::Row>
    where
        O: IntoRow,
        N: IntoVal<u32>,
        C: Fn(T::Vals) -> N + 'a,
        F: Fn(T::Vals, Val<u32>) -> O + 'a,
    {
        let spread = max.max(1);
        let len = self.len as u64 * spread as u64;
        if self.error.is_none() && len > MAX_LEN as u64 {
            self.error = Some(Error::TooLarge {
                len: len as usize,
                max: MAX_LEN,
            });
        }
        self.len = len as usize;
        self.stages.push(Stage::Expand { max: spread });
        self.retype::<(T, u32)>()
            .filter(move |(x, j)| j.lt(count(x).into_val().min(max)))
            .map(move |(x, j)| f(x, j))
    }
}

impl<T> Query<'_, T> {
    /// How many positions each row of stage `s` spreads over: the product of the `max` of
    /// the expansions from `s` on (saturated; over an empty source it is never used).
    pub(super) fn spread_from(&self, s: usize) -> u32 {
        self.stages[s.min(self.stages.len())..]
            .iter()
            .map(|t| match t {
                Stage::Expand { max } => *max as u64,
                _ => 1,
            })
            .product::<u64>()
            .min(u32::MAX as u64) as u32
    }
}
