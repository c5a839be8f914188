//! Sorts: `ctx.from(&xs).sort().to_vec()`, a stable least-significant-digit radix sort built
//! from kiln kernels, so it runs on every backend.
//!
//! The query's rows are first written to device columns (the fused element function, filters
//! included). The key of each row becomes an unsigned integer of 32 or 64 bits whose order is
//! the key's order (for floats IEEE 754's total order, as `f32::total_cmp`), and each pass
//! sorts by one 8-bit digit of it, lowest first:
//!
//! 1. the rows are cut into chunks, and the digits of each chunk are counted and stored
//!    digit-major (`counts[digit * chunks + chunk]`);
//! 2. an exclusive scan of the counts gives every (digit, chunk) pair its first output place;
//! 3. each chunk moves its rows, in order, to those places.
//!
//! The chunked plan (CPUs) gives each work item a long chunk, counted in a private histogram
//! and moved row by row. The tiled plan (GPUs) gives each group a tile of `group * items`
//! rows, read so that neighbouring work items read neighbouring rows: the count uses shared
//! atomics, and the move ranks the tile's digits in shared memory first, by four stable
//! splits on two bits each (a scan over the group per split), so that rows of one digit
//! leave the tile as one run of neighbouring places.
//!
//! Chunks keep their order and the scan puts earlier chunks first, so every pass is stable,
//! and the sort is. A key of `b` bits takes at most `b / 8` passes: a first reduction ANDs and
//! ORs the ordered keys, and only the digits where the two differ get a pass (a pass over a
//! digit every row shares would leave the rows where they are).
//!
//! A key of several parts (a tuple key, `then_by`) packs its parts' ordered bits side by
//! side, the first part highest, into keys of at most 64 bits; when they take more, one sort
//! per 64 bits runs, the last parts' first (see [`keys::rounds`]), each stable.

use super::*;
pub use keys::SortKey;
use keys::{rounds, Key};
use radix::KeySort;

mod keys;
mod radix;

pub(super) use keys::ordered_bits;

/// A sort of a query's rows, from [`Query::sort`], [`Query::sort_desc`],
/// [`Query::sort_by_key`] or [`Query::sort_by_key_desc`], with the ties ordered by the keys
/// of [`Sorted::then_by`] and [`Sorted::then_by_desc`]. Nothing runs until
/// [`Sorted::to_vec`] or [`Sorted::to_buffer`].
///
/// ```
/// # use kiln::prelude::*;
/// let ctx = Context::with_backend(BackendKind::Cpu)?;
/// let scores = [71i32, -5, 98, 71, 12];
/// let mut rust = scores.to_vec();
/// rust.sort();
/// assert_eq!(ctx.from(&scores).sort().to_vec()?, rust);
/// # Ok::<(), kiln::Error>(())
/// ```
pub struct Sorted<'a, T> {
    query: Query<'a, T>,
    /// The keys, the first deciding.
    keys: Vec<Key<'a>>,
}

impl<'a, T: Row> Query<'a, T> {
    /// Sorts the rows by `key` of each row, smallest key first; rows with equal keys keep
    /// their input order (the sort is stable). Float keys sort in IEEE 754 total order
    /// (`f32::total_cmp`: -NaN first, then -inf, ..., -0 before +0, ..., +inf, +NaN last).
    /// Nothing runs until the returned [`Sorted`]'s `to_vec` or `to_buffer`.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let (names, ages) = ([1u32, 2, 3, 4], [40u32, 30, 40, 20]);
    /// let by_age = ctx.from(&names).zip(&ages).sort_by_key(|(_, age)| age).to_vec()?;
    /// assert_eq!(by_age, [(4, 20), (2, 30), (1, 40), (3, 40)]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn sort_by_key<K: SortKey, F: Fn(T::Vals) -> K + 'a>(self, key: F) -> Sorted<'a, T> {
        self.sorted_by(key, false)
    }

    /// Like [`Query::sort_by_key`], largest key first; rows with equal keys still keep their
    /// input order.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let (names, ages) = ([1u32, 2, 3, 4], [40u32, 30, 40, 20]);
    /// let oldest = ctx.from(&names).zip(&ages).sort_by_key_desc(|(_, age)| age).to_vec()?;
    /// assert_eq!(oldest, [(1, 40), (3, 40), (2, 30), (4, 20)]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn sort_by_key_desc<K: SortKey, F: Fn(T::Vals) -> K + 'a>(self, key: F) -> Sorted<'a, T> {
        self.sorted_by(key, true)
    }

    fn sorted_by<K: SortKey, F: Fn(T::Vals) -> K + 'a>(self, key: F, desc: bool) -> Sorted<'a, T> {
        Sorted {
            query: self,
            keys: vec![user_key::<T, K, F>(KEY_CLOSURE, key, desc)],
        }
    }

    /// A sort by the rows' first columns, one of each of `key_types`, the first deciding.
    pub(super) fn sorted_by_first_columns(
        self,
        key_types: &[ScalarType],
        desc: bool,
    ) -> Sorted<'a, T> {
        let parts = key_types.len();
        Sorted {
            query: self,
            keys: vec![Key {
                key: Box::new(move |cols| cols[..parts].to_vec()),
                types: key_types.to_vec(),
                desc,
            }],
        }
    }
}

/// The key `key` of rows of `T`, run as user code numbered `closure`.
fn user_key<'a, T: Row, K: SortKey, F: Fn(T::Vals) -> K + 'a>(
    closure: u32,
    key: F,
    desc: bool,
) -> Key<'a> {
    let mut types = Vec::new();
    K::part_types(&mut types);
    Key {
        key: Box::new(move |cols| {
            let v = T::vals(&mut cols.into_iter());
            let mut parts = Vec::new();
            constants::user_code(closure, || key(v)).parts(&mut parts);
            parts
        }),
        types,
        desc,
    }
}

impl<'a, T: Numeric + Row> Query<'a, T> {
    /// Sorts the elements, smallest first, floats in IEEE 754 total order (see
    /// [`Query::sort_by_key`]).
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// assert_eq!(ctx.from(&[3i32, -1, 2]).sort().to_vec()?, [-1, 2, 3]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn sort(self) -> Sorted<'a, T> {
        self.sorted_by_self(false)
    }

    /// Sorts the elements, largest first.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// assert_eq!(ctx.from(&[3i32, -1, 2]).sort_desc().to_vec()?, [3, 2, -1]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn sort_desc(self) -> Sorted<'a, T> {
        self.sorted_by_self(true)
    }

    fn sorted_by_self(self, desc: bool) -> Sorted<'a, T> {
        self.sorted_by_first_columns(&[T::TYPE], desc)
    }
}

impl<'a, T: Row> Sorted<'a, T> {
    /// Orders the rows whose keys so far are equal by `key`, smallest first (LINQ's
    /// `ThenBy`); rows equal in every key keep their input order. `key` returns a value or a
    /// tuple, as [`Query::sort_by_key`]'s does.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let (city, age) = ([2u32, 1, 2, 1, 2], [30i8, 41, -7, 41, 30]);
    /// let rows = ctx.from(&city).zip(&age).sort_by_key(|(c, _)| c).then_by_desc(|(_, a)| a);
    /// assert_eq!(rows.to_vec()?, [(1, 41), (1, 41), (2, 30), (2, 30), (2, -7)]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn then_by<K: SortKey, F: Fn(T::Vals) -> K + 'a>(self, key: F) -> Sorted<'a, T> {
        self.then(key, false)
    }

    /// Like [`Sorted::then_by`], largest first (LINQ's `ThenByDescending`).
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let (team, score) = ([1u8, 0, 1, 0], [5.5f64, 2.0, 9.0, 3.5]);
    /// let q = ctx.from(&team).zip(&score).sort_by_key(|(t, _)| t).then_by_desc(|(_, s)| s);
    /// assert_eq!(q.to_vec()?, [(0, 3.5), (0, 2.0), (1, 9.0), (1, 5.5)]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn then_by_desc<K: SortKey, F: Fn(T::Vals) -> K + 'a>(self, key: F) -> Sorted<'a, T> {
        self.then(key, true)
    }

    /// Appends a key; its closure is user code numbered below the value function's, one
    /// number per key (see [`constants::user_code`]).
    fn then<K: SortKey, F: Fn(T::Vals) -> K + 'a>(mut self, key: F, desc: bool) -> Sorted<'a, T> {
        let closure = VALUE_CLOSURE - self.keys.len() as u32;
        self.keys.push(user_key::<T, K, F>(closure, key, desc));
        self
    }

    /// Runs the sort and collects the rows into a `Vec`. Fails as the query's other terminals
    /// do (`TooLarge`, `LengthMismatch`, an allocation or launch error of the backend).
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let (name_ids, ages) = ([10u32, 11, 12, 13], [40u8, 25, 33, 25]);
    /// // Rows sorted by age, youngest first; equal ages keep their input order.
    /// let rows = ctx.from(&name_ids).zip(&ages).sort_by_key(|(_, age)| age).to_vec()?;
    /// assert_eq!(rows, [(11, 25), (13, 25), (12, 33), (10, 40)]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn to_vec(mut self) -> Result<Vec<T>> {
        let _span = self.query.plan_span("sort to_vec");
        self.query.check()?;
        let (rows, selected) = self.query.materialize()?;
        collect_rows(selected, &mut |outs| self.passes(&rows, selected, outs))
    }

    /// Runs the sort into new device columns, one per column of the rows; returns them and
    /// how many rows there are.
    pub(super) fn into_columns(mut self) -> Result<(Columns, usize)> {
        self.query.check()?;
        let (rows, selected) = self.query.materialize()?;
        Ok((self.sort_rows(&rows, selected)?, selected))
    }

    /// Sorts `rows` (`n` of them, as [`Query::materialize`] wrote them) into new device
    /// columns.
    fn sort_rows(&self, rows: &Columns, n: usize) -> Result<Columns> {
        let outs = alloc_rows(&self.query.ctx, &Query::<T>::out_types(), n)?;
        self.passes(
            rows,
            n,
            outs.iter().map(|m| LaunchArg::Device(&**m)).collect(),
        )?;
        Ok(outs)
    }

    /// The radix sorts by packed keys the sort runs, the last first (see [`keys::rounds`]).
    fn rounds(&self) -> Vec<keys::Packed<'_, 'a>> {
        let wide = self.query.ctx.device().features.int64;
        rounds(&self.keys, if wide { 64 } else { 32 })
    }

    /// The radix sort by the packed key `key`.
    fn by<'s>(&'s self, key: keys::Packed<'s, 'a>) -> KeySort<'s, 'a, T> {
        KeySort {
            ctx: &self.query.ctx,
            key,
            _rows: PhantomData,
        }
    }

    /// Sorts `rows` (`n` of them) by every key, one radix sort per packed key (through new
    /// columns between them), and writes the rows in their final order into `outs` (one
    /// argument per column).
    fn passes(&self, rows: &Columns, n: usize, outs: Vec<LaunchArg<'_>>) -> Result<()> {
        let rounds = self.rounds();
        let mut between: Option<Columns> = None;
        for key in &rounds[..rounds.len() - 1] {
            let next = alloc_rows(&self.query.ctx, &Query::<T>::out_types(), n)?;
            let args = next.iter().map(|m| LaunchArg::Device(&**m)).collect();
            self.by(*key)
                .passes(between.as_ref().unwrap_or(rows), n, args)?;
            between = Some(next);
        }
        let last = rounds[rounds.len() - 1];
        self.by(last)
            .passes(between.as_ref().unwrap_or(rows), n, outs)
    }
}

impl<'a, T: Row> Sorted<'a, T> {
    /// What the sort would run on the context's device ([`Sorted::explain_on`] its profile).
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let plan = ctx.from(&[3u32, 1, 2]).sort_desc().explain();
    /// assert!(plan.starts_with("device: cpu"), "{plan}");
    /// assert!(plan.contains("launch query_sort"), "{plan}");
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn explain(&self) -> String {
        device_line(&self.query.ctx) + &self.explain_on(&self.query.ctx.profile())
    }

    /// What the sort would run on a device of `profile`, without running anything: the plan
    /// writing the query's rows to device columns, then the sort's plan over as many rows as
    /// the query's source has, with a pass per byte of the key. A run sorts only the rows a
    /// filter keeps, and first reduces the keys (a plan not shown here) to skip the bytes
    /// every row shares (see the module).
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let keys: Vec<u32> = (0..100_000).rev().collect();
    /// let gpu = kiln::DeviceProfile { shape: kiln::PlanShape::Grouped, ..ctx.profile() };
    /// let plan = ctx.from(&keys).sort().explain_on(&gpu);
    /// assert_eq!(plan.matches("launch query_sort_scatter").count(), 4);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn explain_on(&self, profile: &DeviceProfile) -> String {
        let plan = self.passes_plan(profile, self.query.len);
        format!("{}\n{plan}", self.query.materialize_plan(profile))
    }

    /// The sort's plans over `n` rows on `profile` with a pass per byte of each key, one per
    /// radix sort, as [`Sorted::explain_on`] prints them.
    pub(super) fn passes_plan(&self, profile: &DeviceProfile, n: usize) -> String {
        let plans: Vec<String> = self
            .rounds()
            .into_iter()
            .map(|key| self.by(key).every_digit_plan(profile, n).to_string())
            .collect();
        plans.join("\n")
    }
}

impl<'a, T: Scalar + Row> Sorted<'a, T> {
    /// Runs the sort and collects the elements into a new buffer on the device, without
    /// copying them to the host. Fails as [`Sorted::to_vec`] does.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let xs = ctx.upload(&[0.5f32, -2.0, 9.0, 1.0])?;
    /// let sorted = ctx.from_buffer(&xs).sort_desc().to_buffer()?;
    /// // The largest two, from the sorted buffer on the device.
    /// assert_eq!(ctx.from_buffer(&sorted).enumerate().filter(|(i, _)| i.lt(2u32)).map(|(_, x)| x).to_vec()?, [9.0, 1.0]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn to_buffer(mut self) -> Result<Buffer<T>> {
        let _span = self.query.plan_span("sort to_buffer");
        self.query.check()?;
        let (rows, selected) = self.query.materialize()?;
        new_buffer(&self.query.ctx, selected, |out| {
            self.passes(&rows, selected, vec![out])
        })
    }
}
