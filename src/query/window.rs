//! Windows on the source rows: `skip(n)`, `take(n)`, `skip_while(pred)` and
//! `take_while(pred)` narrow one window stage, a filter on the source index (`start..end`).
//! Only filters change positions, so `skip` and `take` after a filter first run the rows
//! kept into device columns ([`Query::kept_rows`]) and number those. The `while` forms need
//! no positions: the first row (of those the filters keep) where the predicate fails has a
//! source index, found by a min reduction when they are called, and that index is a bound
//! of the window, after filters too.

use super::*;

impl<'a, T: Row> Query<'a, T> {
    /// Skips the first `n` rows (every row when there are fewer), as `Iterator::skip`; `take`
    /// and `skip` combine in any order. Before any filter the query still reads every source
    /// row: the skipped ones are dropped as a filter drops rows. After a filter it counts the
    /// rows the filter keeps: the query so far runs when `skip` is called, into device
    /// columns the query holds (see [`Query::enumerate`]); an error of that run is the
    /// terminal's.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let xs = [1u32, 2, 3, 4, 5, 6];
    /// assert_eq!(ctx.from(&xs).skip(4).to_vec()?, [5, 6]);
    /// assert_eq!(ctx.from(&xs).skip(1).take(3).map(|x| x * 10).to_vec()?, [20, 30, 40]);
    /// assert_eq!(ctx.from(&xs).skip(9).sum()?, 0);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn skip(self, n: usize) -> Query<'a, T> {
        self.window(n, usize::MAX)
    }

    /// Keeps the first `n` rows (every row when there are fewer), as `Iterator::take`; after
    /// a filter it runs as [`Query::skip`] does.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let xs = [5.0f32, 1.0, 4.0, 2.0];
    /// assert_eq!(ctx.from(&xs).take(3).sort().to_vec()?, [1.0, 4.0, 5.0]);
    /// assert_eq!(ctx.from(&xs).take(2).filter(|x| x.gt(2.0)).count()?, 1);
    /// assert_eq!(ctx.from(&xs).filter(|x| x.lt(5.0)).take(2).to_vec()?, [1.0, 4.0]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn take(self, n: usize) -> Query<'a, T> {
        self.window(0, n)
    }

    /// Keeps the rows up to the first one (of those the filters keep) for which `pred` is
    /// false, as `Iterator::take_while`; may come after filters. Runs one reduction over the
    /// rows when called (the sources are borrowed, so its answer holds at the terminal); an
    /// error of that run is the terminal's.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let xs = [3i32, -1, 4, 1, -5, 9, 2];
    /// assert_eq!(ctx.from(&xs).take_while(|x| x.lt(5)).to_vec()?, [3, -1, 4, 1, -5]);
    /// let positive = ctx.from(&xs).filter(|x| x.gt(0));
    /// assert_eq!(positive.take_while(|x| x.lt(5)).sum()?, 8);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn take_while<F: Fn(T::Vals) -> Val<bool> + 'a>(self, pred: F) -> Query<'a, T> {
        self.while_holds(pred, false)
    }

    /// Drops the rows up to the first one (of those the filters keep) for which `pred` is
    /// false and keeps the rest, as `Iterator::skip_while`; runs as [`Query::take_while`]
    /// does.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let xs = [1u32, 2, 7, 3, 8];
    /// assert_eq!(ctx.from(&xs).skip_while(|x| x.lt(5)).to_vec()?, [7, 3, 8]);
    /// assert_eq!(ctx.from(&xs).skip_while(|x| x.lt(100)).count()?, 0);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn skip_while<F: Fn(T::Vals) -> Val<bool> + 'a>(self, pred: F) -> Query<'a, T> {
        self.while_holds(pred, true)
    }

    /// The window up to (`skip`: from) the first row where `pred` fails.
    fn while_holds<F: Fn(T::Vals) -> Val<bool> + 'a>(
        mut self,
        pred: F,
        skip: bool,
    ) -> Query<'a, T> {
        if self.error.is_some() {
            return self;
        }
        let first = match self.first_failing(&pred) {
            Ok(first) => first,
            Err(e) => {
                self.error = Some(e);
                return self;
            }
        };
        let (start, end) = self.window_bounds();
        let cut = first.clamp(start, end);
        match skip {
            true => self.set_window(cut, end),
            false => self.set_window(start, cut),
        }
    }

    /// The source index of the first row the stages keep for which `pred` is false
    /// (`u32::MAX` when there is none): a min reduction of the indices. Fails as a
    /// reduction does.
    fn first_failing(&mut self, pred: &dyn Fn(T::Vals) -> Val<bool>) -> Result<u32> {
        let id = self.stages.len() as u32;
        self.stages.push(Stage::Enumerate);
        let found = self.reduce_projected(
            &[ScalarValue::U32(u32::MAX)],
            &|a, b| vec![a[0].typed::<u32>().min(b[0].typed::<u32>()).erase()],
            &|vals| {
                let i = vals[0].typed::<u32>();
                let row = T::vals(&mut vals.into_iter().skip(1));
                let holds = constants::user_code(id, || pred(row));
                vec![select(holds, u32::MAX, i).erase()]
            },
            Order::Any,
        );
        self.stages.pop();
        Ok(found?[0].to_bits() as u32)
    }

    /// The bounds of the window stage (everything when there is none).
    fn window_bounds(&self) -> (u32, u32) {
        self.stages
            .iter()
            .find_map(|s| match s {
                Stage::Window { start, end } => Some((*start, *end)),
                _ => None,
            })
            .unwrap_or((0, u32::MAX))
    }

    /// Sets the window stage's bounds, adding the stage when there is none.
    fn set_window(mut self, start: u32, end: u32) -> Query<'a, T> {
        let window = Stage::Window { start, end };
        match self
            .stages
            .iter()
            .position(|s| matches!(s, Stage::Window { .. }))
        {
            Some(k) => self.stages[k] = window,
            None => self.stages.push(window),
        }
        self
    }

    /// Skips `skip` rows, then keeps at most `take`: narrows the query's window stage, or
    /// adds one.
    fn window(self, skip: usize, take: usize) -> Query<'a, T> {
        let q = self.kept_rows(Stage::is_filter);
        let (start, end) = q.window_bounds();
        let start_now = (start as u64).saturating_add(skip as u64).min(end as u64);
        let end_now = start_now.saturating_add(take as u64).min(end as u64);
        q.set_window(start_now as u32, end_now as u32)
    }
}
