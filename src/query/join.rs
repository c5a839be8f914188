//! Joins on an integer key: `join` (inner), `left_join`, `semi_join` and `anti_join`, on
//! the device.
//!
//! Both sides run first, when the join is called, into device columns (their stages, filters
//! included). The right side's keys are then sorted, each with its row (the radix sort of
//! `sort`, stable, so the rows of one key keep their order), and each left row finds the run
//! of its key among the sorted keys, in one of three ways, picked by the right side's size
//! and the span of its keys (one reduction finds the smallest and largest):
//!
//! - **direct table**, when the keys span at most `4 * m` values (`m` right rows; at least
//!   4096, at most 2^24): a table holds, for every value from the smallest key to the
//!   largest, where its run starts, so a left row reads its run's start and end at
//!   `key - smallest` (two loads);
//! - **hash table** otherwise, past [`SEARCH_MAX`] right rows: a table of `2^k >= 2m`
//!   slots holds each key's run start (linear probing; a compare-and-swap claims a slot),
//!   so a left row reads a slot or two;
//! - **binary search** of the sorted keys for a smaller right side (`log2(m)` steps).
//!
//! The end of a run is found by galloping from its start (about `2 log2` of its length).
//!
//! A semi (anti) join then keeps the left rows whose run is (is not) empty: a filter on the
//! run lengths. An inner (left) join scans the lengths (at least one each) into each left
//! row's first output place and writes the pairs: one work item per left row while no run
//! is longer than [`ROW_LOOP`], otherwise one per pair, which searches the places for its
//! left row, so a key with many matches does not hold up one work item. The output order is
//! LINQ's `Join`: the left rows in order, each with its matches in the right side's order.

use super::group::key_ranges;
use super::*;

/// Right rows per value the keys may span for the direct table: a denser right side reads
/// its runs from a table, a sparser one searches them.
const TABLE_SPREAD: i128 = 4;
/// The span of keys a table covers whatever the right side's size.
const TABLE_MIN_SPAN: i128 = 4096;
/// The most entries a table takes.
const TABLE_MAX_SPAN: i128 = 1 << 24;
/// The most right rows a join searches by bisection; a larger side of sparse keys gets a
/// hash table.
const SEARCH_MAX: usize = 1024;
/// The most matches of a left row for which the pairs are written one work item per left
/// row; past it, one work item per pair.
const ROW_LOOP: u32 = 32;
/// The number [`constants::user_code`] gives the table's smallest key in the probe kernel.
const TABLE_MIN_CLOSURE: u32 = u32::MAX - 1024;

/// How a join finds each left row's run of matches among the sorted right keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Probe {
    /// A binary search of the sorted keys (a small right side).
    Search,
    /// An open-addressing hash table of `2^bits` slots, each empty or holding the first
    /// sorted row of one key (a large right side of sparse keys).
    Hash { bits: u32 },
    /// A table of run starts for every key from `min` to `max`, `span` of them.
    Table { min: i128, max: i128, span: u32 },
}

impl Probe {
    /// How a join with `m` right rows whose keys run from `min` to `max` finds its matches
    /// (see the module).
    fn pick(m: usize, min: i128, max: i128) -> Probe {
        let span = max - min + 1;
        let limit = (TABLE_SPREAD * m as i128).max(TABLE_MIN_SPAN);
        match m > 0 && span <= limit.min(TABLE_MAX_SPAN) {
            true => Probe::Table {
                min,
                max,
                span: span as u32,
            },
            false if m <= SEARCH_MAX => Probe::Search,
            false => Probe::Hash {
                bits: (2 * m).next_power_of_two().ilog2(),
            },
        }
    }

    /// The line `explain` prints for it.
    fn describe(&self, m: usize) -> String {
        match self {
            Probe::Search => format!(
                "join: binary search of {m} sorted right key(s) per left row (at most \
                 {SEARCH_MAX} right rows, whose keys span more than {TABLE_SPREAD} values per \
                 row)"
            ),
            Probe::Hash { bits } => format!(
                "join: hash table of {} slots over {m} right row(s) (their keys span more \
                 than {TABLE_SPREAD} values per row)",
                1u64 << bits
            ),
            Probe::Table { min, max, span } => format!(
                "join: direct table of {span} key value(s), {min} to {max} ({m} right row(s))"
            ),
        }
    }
}

/// The key `v` (a value of `K`) as a constant of user code numbered `closure`.
fn key_constant<K: Int>(closure: u32, v: i128) -> Val<K> {
    constants::user_code(closure, || {
        lit_value(ScalarValue::from_bits(K::TYPE, v as u64)).typed::<K>()
    })
}

/// Which left rows a join keeps.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Keep {
    /// Those with a match (a semi join).
    Matched,
    /// Those without one (an anti join).
    Unmatched,
}

/// The right side of a join, ready to probe: its rows, its keys sorted with the row each
/// came from, and how left rows find their runs.
struct Built {
    rows: Columns,
    m: usize,
    keys: Arc<dyn DeviceMemory>,
    order: Arc<dyn DeviceMemory>,
    probe: Probe,
    /// What the probe reads besides the keys: the run start of every key value the table
    /// covers and the end of the last ([`Probe::Table`]), or the hash table's slots
    /// ([`Probe::Hash`]).
    table: Option<Arc<dyn DeviceMemory>>,
}

/// The left side of a join after its probe: its rows, and for each its first match among the
/// sorted right keys and how many there are.
struct Probed {
    rows: Columns,
    n: usize,
    first: Arc<dyn DeviceMemory>,
    count: Arc<dyn DeviceMemory>,
    how: String,
}

impl<'a, A: Row> Query<'a, A> {
    /// Pairs each row with every row of `other` whose key is equal (an inner join, LINQ's
    /// `Join`): the rows come in this query's order, each with its matches in `other`'s
    /// order. Keys are integers of one type, from `left_key` of this query's rows and
    /// `right_key` of `other`'s. Both queries (filters and maps included) and the join run
    /// when `join` is called, into device columns the returned query holds, so it goes on
    /// like any query; an error of that run is its terminal's, as is `Unsupported` for a
    /// query of another context and `TooLarge` for more than [`crate::MAX_LEN`] pairs.
    /// `explain` says how the matches were found: a direct table when the right keys are
    /// dense, a hash table when they are sparse and many, binary search when few (see the
    /// guide).
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let (order_customer, order_total) = ([7u32, 3, 7, 9], [10.0f32, 2.5, 4.0, 8.0]);
    /// let (customer, region) = ([3u32, 7, 7], [1u8, 2, 5]);
    /// let orders = ctx.from(&order_customer).zip(&order_total);
    /// let pairs = orders.join(ctx.from(&customer).zip(&region), |(c, _)| c, |(c, _)| c);
    /// assert_eq!(
    ///     pairs.to_vec()?,
    ///     [((7, 10.0), (7, 2)), ((7, 10.0), (7, 5)), ((3, 2.5), (3, 1)), ((7, 4.0), (7, 2)), ((7, 4.0), (7, 5))]
    /// );
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn join<B: Row, K: Int + Row<Vals = Val<K>>>(
        self,
        other: Query<'_, B>,
        left_key: impl Fn(A::Vals) -> Val<K>,
        right_key: impl Fn(B::Vals) -> Val<K>,
    ) -> Query<'a, (A, B)> {
        self.paired::<B, K, (A, B)>(other, &left_key, &right_key, false)
    }

    /// Like [`Query::join`], and each row without a match in `other` comes once, with `None`
    /// (SQL's left outer join; LINQ's `GroupJoin` with `DefaultIfEmpty`): rows
    /// `(A, Option<B>)`, in this query's order. Inside closures the right side is a
    /// [`crate::Maybe`]: `is_some`, and its values (zeros when absent) or `unwrap_or`. Runs
    /// and fails as [`Query::join`] does.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let (order_customer, order_total) = ([7u32, 3, 8], [10i32, 25, 4]);
    /// let (customer, discount) = ([3u32, 7, 7], [5i32, 1, 2]);
    /// let rows = ctx.from(&order_customer).zip(&order_total).left_join(
    ///     ctx.from(&customer).zip(&discount),
    ///     |(c, _)| c,
    ///     |(c, _)| c,
    /// );
    /// let due = rows.map(|((_, total), d)| total - d.unwrap_or((0, 0)).1).to_vec()?;
    /// assert_eq!(due, [9, 8, 20, 4]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn left_join<B: Row, K: Int + Row<Vals = Val<K>>>(
        self,
        other: Query<'_, B>,
        left_key: impl Fn(A::Vals) -> Val<K>,
        right_key: impl Fn(B::Vals) -> Val<K>,
    ) -> Query<'a, (A, Option<B>)> {
        self.paired::<B, K, (A, Option<B>)>(other, &left_key, &right_key, true)
    }

    /// The pairs of an inner join (rows `P` of `(A, B)`), or of a left join when `outer`
    /// (`(A, Option<B>)`).
    fn paired<B: Row, K: Int + Row<Vals = Val<K>>, P: Row>(
        self,
        other: Query<'_, B>,
        left_key: &dyn Fn(A::Vals) -> Val<K>,
        right_key: &dyn Fn(B::Vals) -> Val<K>,
        outer: bool,
    ) -> Query<'a, P> {
        let ctx = self.ctx.clone();
        let run = || -> Result<(Columns, usize, String)> {
            let (built, probed) = self.probe(other, left_key, right_key)?;
            let (pairs, total) = pairs::<A, B>(&ctx, &built, &probed, outer)?;
            Ok((pairs, total, probed.how))
        };
        match run() {
            Ok((pairs, total, how)) => {
                let mut q = Query::over_sources(&ctx, pairs.into_iter().map(Source::Owned), total);
                q.ran.push(how);
                q
            }
            Err(e) => Query::failed(&ctx, e),
        }
    }

    /// Keeps the rows with at least one row of `other` of an equal key (a semi join, SQL's
    /// `WHERE key IN (SELECT ...)`), each once, in order. Runs as [`Query::join`] does, without
    /// writing the pairs.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let (ids, banned) = ([4i64, 8, 15, 16, 23], [15i64, 4, 4, 99]);
    /// let q = ctx.from(&ids).semi_join(ctx.from(&banned), |id| id, |b| b);
    /// assert_eq!(q.to_vec()?, [4, 15]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn semi_join<B: Row, K: Int + Row<Vals = Val<K>>>(
        self,
        other: Query<'_, B>,
        left_key: impl Fn(A::Vals) -> Val<K>,
        right_key: impl Fn(B::Vals) -> Val<K>,
    ) -> Query<'a, A> {
        self.kept_by_matches(other, &left_key, &right_key, Keep::Matched)
    }

    /// Keeps the rows without a row of `other` of an equal key (an anti join, SQL's
    /// `WHERE key NOT IN (SELECT ...)` without nulls), in order. Runs as [`Query::join`] does,
    /// without writing the pairs.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let (ids, banned) = ([4i64, 8, 15, 16, 23], [15i64, 4, 4, 99]);
    /// let q = ctx.from(&ids).anti_join(ctx.from(&banned), |id| id, |b| b);
    /// assert_eq!(q.to_vec()?, [8, 16, 23]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn anti_join<B: Row, K: Int + Row<Vals = Val<K>>>(
        self,
        other: Query<'_, B>,
        left_key: impl Fn(A::Vals) -> Val<K>,
        right_key: impl Fn(B::Vals) -> Val<K>,
    ) -> Query<'a, A> {
        self.kept_by_matches(other, &left_key, &right_key, Keep::Unmatched)
    }

    /// The rows whose matches in `other` are as `keep` says: a query over the rows, each
    /// with its count of matches, that filters on the count and drops it.
    fn kept_by_matches<B: Row, K: Int + Row<Vals = Val<K>>>(
        self,
        other: Query<'_, B>,
        left_key: &dyn Fn(A::Vals) -> Val<K>,
        right_key: &dyn Fn(B::Vals) -> Val<K>,
        keep: Keep,
    ) -> Query<'a, A> {
        let ctx = self.ctx.clone();
        let probed = match self.probe(other, left_key, right_key) {
            Ok((_, probed)) => probed,
            Err(e) => return Query::failed(&ctx, e),
        };
        let sources = probed.rows.into_iter().chain([probed.count]);
        let mut q = Query::<(A, u32)>::over_sources(&ctx, sources.map(Source::Owned), probed.n);
        q.ran.push(probed.how);
        let id = q.stages.len() as u32;
        q.stages.push(Stage::Filter(Box::new(move |cols| {
            let count = cols[cols.len() - 1].typed::<u32>();
            constants::user_code(id, || match keep {
                Keep::Matched => count.gt(0u32),
                Keep::Unmatched => count.eq(0u32),
            })
        })));
        q.map_erased(|mut cols| {
            cols.pop();
            cols
        })
        .retype()
    }

    /// Runs both sides into device columns, builds the right side (sorted keys, and the
    /// table its probe reads) and finds each left row's run of matches.
    fn probe<B: Row, K: Int + Row<Vals = Val<K>>>(
        mut self,
        mut other: Query<'_, B>,
        left_key: &dyn Fn(A::Vals) -> Val<K>,
        right_key: &dyn Fn(B::Vals) -> Val<K>,
    ) -> Result<(Built, Probed)> {
        let _span = self.plan_span("join");
        if !Arc::ptr_eq(self.ctx.backend(), other.ctx.backend()) {
            return Err(Error::Unsupported {
                backend: self.ctx.device().backend,
                what: "join with a query of another context".into(),
            });
        }
        self.check()?;
        other.check()?;
        let (right, m) = other.materialize()?;
        let built = build::<B, K>(&self.ctx, right, m, right_key)?;
        let (rows, n) = self.materialize()?;
        let (first, count) = probe_rows::<A, K>(&self.ctx, &built, &rows, n, left_key)?;
        let how = built.probe.describe(built.m);
        Ok((
            built,
            Probed {
                rows,
                n,
                first,
                count,
                how,
            },
        ))
    }
}

/// Sorts the `m` right rows' keys with the row each came from, picks the probe and makes
/// the table it reads (see the module). Fails as the sort and the reductions do.
fn build<B: Row, K: Int + Row<Vals = Val<K>>>(
    ctx: &Context,
    rows: Columns,
    m: usize,
    right_key: &dyn Fn(B::Vals) -> Val<K>,
) -> Result<Built> {
    let refs: Vec<&dyn DeviceMemory> = rows.iter().map(|c| &**c).collect();
    let keyed = Query::<B>::over_device(ctx, &refs, m)
        .enumerate()
        .map(|(i, row)| (right_key(row), i));
    let (sorted, _) = keyed.sort_by_key(|(k, _)| k).into_columns()?;
    let [keys, order]: [Arc<dyn DeviceMemory>; 2] = sorted
        .try_into()
        .map_err(|_| internal("the sorted keys of a join are not two columns"))?;
    let probe = match m {
        0 => Probe::Search,
        _ => {
            let sorted = Query::<K>::over_device(ctx, &[&*keys], m);
            let (min, max) = key_ranges(&sorted, &[K::TYPE])?[0];
            Probe::pick(m, min, max)
        }
    };
    let table = match probe {
        Probe::Search => None,
        Probe::Table { min, span, .. } => Some(table::<K>(ctx, &keys, m, min, span)?),
        Probe::Hash { bits } => Some(hash_table::<K>(ctx, &keys, m, bits)?),
    };
    Ok(Built {
        rows,
        m,
        keys,
        order,
        probe,
        table,
    })
}

/// A kiln bug, as an error.
fn internal(what: &str) -> Error {
    Error::Internal { what: what.into() }
}

/// The first index of `keys[..m]` (sorted) whose key is not below `key` (`past`: above).
fn search<K: Int>(keys: Mem<K>, m: Val<u32>, key: Val<K>, past: bool) -> Val<u32> {
    partition_point(lit(0u32), m, |mid| {
        let at = keys.load(mid);
        if past {
            at.le(key)
        } else {
            at.lt(key)
        }
    })
}

/// The end of the run of `key` in `keys[..m]` (sorted) that starts at `start` (`start`
/// itself when its key is not `key`): a galloping search, windows of 1, 2, 4, ... keys from
/// `start` until one ends past the run, then a binary search of the last half window, so a
/// run of `c` keys takes about `2 log2(c)` steps whatever `m`.
fn run_end<K: Int>(keys: Mem<K>, m: Val<u32>, start: Val<u32>, key: Val<K>) -> Val<u32> {
    let width = Var::new("width", 1u32);
    let room = m - start;
    while_(
        || {
            let w = width.get();
            w.le(room).and(keys.load(start + w - 1u32).le(key))
        },
        || width.set(width.get() * 2u32),
    );
    let from = start + (width.get() >> 1u32);
    let to = start + width.get().min(room);
    partition_point(from, to, |j| keys.load(j).le(key))
}

/// The first index in `lo..hi` where `before` is false (`hi` when there is none), for a
/// `before` true on a prefix of the indices and false after it: a binary search, as
/// `slice::partition_point`.
fn partition_point(lo: Val<u32>, hi: Val<u32>, before: impl Fn(Val<u32>) -> Val<bool>) -> Val<u32> {
    let lo = Var::new("lo", lo);
    let hi = Var::new("hi", hi);
    while_(
        || lo.get().lt(hi.get()),
        || {
            let mid = lo.get() + ((hi.get() - lo.get()) >> 1u32);
            if_else(before(mid), || lo.set(mid + 1u32), || hi.set(mid));
        },
    );
    lo.get()
}

/// How far `key` lies past `min`, as a `u32`: right for keys less than 2^32 past it, of any
/// width, as Rust's wrapping `u32` arithmetic on `as u32` casts gives it.
fn offset<K: Int>(key: Val<K>, min: Val<K>) -> Val<u32> {
    key.cast::<u32>() - min.cast::<u32>()
}

/// The table of a dense join: entry `v` the first sorted key not below `min + v`, entry
/// `span` the number of keys. Fails as a launch does.
fn table<K: Int + Row<Vals = Val<K>>>(
    ctx: &Context,
    keys: &Arc<dyn DeviceMemory>,
    m: usize,
    min: i128,
    span: u32,
) -> Result<Arc<dyn DeviceMemory>> {
    let body = |k: &KernelScope| {
        let keys = k.buffer::<K>("keys", Access::Read);
        let m = k.value::<u32>("m");
        let span = k.value::<u32>("span");
        let starts = k.buffer::<u32>("starts", Access::Write);
        let v = global_id(Axis::X);
        let min = key_constant::<K>(TABLE_MIN_CLOSURE, min);
        // Every key lies within the table's span of `min`, so offsets order them.
        if_then(v.le(span), || {
            starts.store(
                v,
                partition_point(lit(0u32), m, |j| offset(keys.load(j), min).lt(v)),
            );
        });
    };
    let entries = span as usize + 1;
    let mut plan = Plan::new(
        "join table",
        ctx.profile(),
        ("query_join_table", [0; 3]),
        Rows::Known(entries),
    );
    let kernel = plan.kernel("query_join_table");
    plan.launch(
        kernel,
        ctx.profile().per_element_grid(entries),
        [
            Binding::Input(0),
            Binding::Scalar("m", m as u32),
            Binding::Scalar("span", span),
            Binding::Output(0),
        ],
    );
    let compiled = ctx.plan(fingerprint_of(plan.key.0, &plan.key.1, body), || {
        Ok(vec![Kernel::build_unvalidated("query_join_table", body)?])
    })?;
    let starts = ctx.backend().alloc(entries * 4)?;
    let sources = [Source::Device(&**keys)];
    Run::start(ctx, plan, compiled, &sources)?
        .finish(&sources, vec![LaunchArg::Device(&*starts)])?;
    Ok(starts)
}

/// The mark of an empty slot of a hash table.
const EMPTY: u32 = u32::MAX;

/// The slot a key hashes to in a table of `2^(32 - shift)` slots: its bits folded to 32
/// (both halves of a 64-bit key), multiplied by an odd constant, the top bits kept.
fn slot_of<K: Int>(key: Val<K>, shift: Val<u32>) -> Val<u32> {
    let low = key.cast::<u32>();
    let folded = match K::TYPE.bits() > 32 {
        true => low ^ (key.cast::<u64>() >> 32u64).cast::<u32>(),
        false => low,
    };
    (folded * 0x9e37_79b1u32) >> shift
}

/// The hash table of a sparse join: `2^bits` slots, each [`EMPTY`] or the first index of
/// one key's run in the `m` sorted `keys`, placed by linear probing from [`slot_of`] (a
/// compare-and-swap claims a slot). Fails as a launch does.
fn hash_table<K: Int + Row<Vals = Val<K>>>(
    ctx: &Context,
    keys: &Arc<dyn DeviceMemory>,
    m: usize,
    bits: u32,
) -> Result<Arc<dyn DeviceMemory>> {
    let size = 1usize << bits;
    let clear = |k: &KernelScope| {
        let size = k.value::<u32>("size");
        let slots = k.buffer::<u32>("slots", Access::Write);
        let s = global_id(Axis::X);
        if_then(s.lt(size), || slots.store(s, EMPTY));
    };
    let insert = |k: &KernelScope| {
        let keys = k.buffer::<K>("keys", Access::Read);
        let m = k.value::<u32>("m");
        let mask = k.value::<u32>("mask");
        let shift = k.value::<u32>("shift");
        let slots = k.buffer::<u32>("slots", Access::ReadWrite);
        let i = global_id(Axis::X);
        if_then(i.lt(m), || {
            let key = keys.load(i);
            // One entry per key: its run's first row.
            let starts_run = i.eq(0u32).or(keys.load(i - 1u32).ne(key));
            if_then(starts_run, || {
                let slot = Var::new("slot", slot_of(key, shift));
                let placed = Var::new("placed", false);
                while_(
                    || placed.get().not(),
                    || {
                        let held = slots.atomic_compare_exchange(slot.get(), EMPTY, i);
                        if_else(
                            held.eq(EMPTY),
                            || placed.set(true),
                            || slot.set((slot.get() + 1u32) & mask),
                        );
                    },
                );
            });
        });
    };
    let mut plan = Plan::new(
        "join hash table",
        ctx.profile(),
        ("query_join_hash", [0; 3]),
        Rows::None,
    );
    let (cleared, inserted) = (
        plan.kernel("query_join_hash_clear"),
        plan.kernel("query_join_hash_insert"),
    );
    plan.launch(
        cleared,
        ctx.profile().per_element_grid(size),
        [Binding::Scalar("size", size as u32), Binding::Input(1)],
    );
    plan.launch(
        inserted,
        ctx.profile().per_element_grid(m),
        [
            Binding::Input(0),
            Binding::Scalar("m", m as u32),
            Binding::Scalar("mask", (size - 1) as u32),
            Binding::Scalar("shift", 32 - bits),
            Binding::Input(1),
        ],
    );
    let compiled = ctx.plan(fingerprint_of(plan.key.0, &plan.key.1, insert), || {
        Ok(vec![
            Kernel::build_unvalidated("query_join_hash_clear", clear)?,
            Kernel::build_unvalidated("query_join_hash_insert", insert)?,
        ])
    })?;
    // The slots are written and read by both launches: an input of the plan, whose outputs
    // bind once each.
    let slots = ctx.backend().alloc(size * 4)?;
    let sources = [Source::Device(&**keys), Source::Device(&*slots)];
    Run::start(ctx, plan, compiled, &sources)?.finish(&sources, Vec::new())?;
    Ok(slots)
}

/// For each of the `n` left `rows`, its first match among the sorted right keys and how many
/// there are. Fails as a launch does.
fn probe_rows<A: Row, K: Int + Row<Vals = Val<K>>>(
    ctx: &Context,
    built: &Built,
    rows: &Columns,
    n: usize,
    left_key: &dyn Fn(A::Vals) -> Val<K>,
) -> Result<(Arc<dyn DeviceMemory>, Arc<dyn DeviceMemory>)> {
    let types = Query::<A>::out_types();
    let width = types.len();
    let probe = built.probe;
    let body = |k: &KernelScope| {
        let cols = declare_columns(k, "rows", &types, Access::Read);
        let n = k.value::<u32>("n");
        let first = k.buffer::<u32>("first", Access::Write);
        let count = k.buffer::<u32>("count", Access::Write);
        let i = global_id(Axis::X);
        let key = |i| {
            let row = load_row(&cols, &types, i);
            constants::user_code(KEY_CLOSURE, || left_key(A::vals(&mut row.into_iter())))
        };
        match probe {
            Probe::Search => {
                let keys = k.buffer::<K>("keys", Access::Read);
                let m = k.value::<u32>("m");
                if_then(i.lt(n), || {
                    let key = key(i);
                    let start = search(keys, m, key, false);
                    first.store(i, start);
                    count.store(i, run_end(keys, m, start, key) - start);
                });
            }
            Probe::Hash { .. } => {
                let keys = k.buffer::<K>("keys", Access::Read);
                let m = k.value::<u32>("m");
                let slots = k.buffer::<u32>("slots", Access::Read);
                let mask = k.value::<u32>("mask");
                let shift = k.value::<u32>("shift");
                if_then(i.lt(n), || {
                    let key = key(i);
                    let slot = Var::new("slot", slot_of(key, shift));
                    let owner = Var::new("owner", slots.load(slot.get()));
                    // Linear probing: past the key's own slot and those other keys took.
                    while_(
                        || owner.get().ne(EMPTY).and(keys.load(owner.get()).ne(key)),
                        || {
                            slot.set((slot.get() + 1u32) & mask);
                            owner.set(slots.load(slot.get()));
                        },
                    );
                    let found = owner.get().ne(EMPTY);
                    let start = select(found, owner.get(), 0u32);
                    first.store(i, start);
                    count.store(i, select(found, run_end(keys, m, start, key) - start, 0u32));
                });
            }
            Probe::Table { min, max, .. } => {
                let starts = k.buffer::<u32>("starts", Access::Read);
                let min = key_constant::<K>(TABLE_MIN_CLOSURE, min);
                let max = key_constant::<K>(TABLE_MIN_CLOSURE - 1, max);
                if_then(i.lt(n), || {
                    let key = key(i);
                    let inside = key.ge(min).and(key.le(max));
                    let v = select(inside, offset(key, min), 0u32);
                    let start = starts.load(v);
                    first.store(i, start);
                    count.store(i, select(inside, starts.load(v + 1u32) - start, 0u32));
                });
            }
        }
    };
    let kind = match probe {
        Probe::Search => 0,
        Probe::Table { .. } => 1,
        Probe::Hash { .. } => 2,
    };
    let mut plan = Plan::new(
        "join probe",
        ctx.profile(),
        ("query_join_probe", [kind, 0, 0]),
        Rows::Known(n),
    );
    let kernel = plan.kernel("query_join_probe");
    let m = Binding::Scalar("m", built.m as u32);
    let lookup = match probe {
        Probe::Search => vec![Binding::Input(width), m],
        Probe::Table { .. } => vec![Binding::Input(width)],
        Probe::Hash { bits } => vec![
            Binding::Input(width),
            m,
            Binding::Input(width + 1),
            Binding::Scalar("mask", ((1u64 << bits) - 1) as u32),
            Binding::Scalar("shift", 32 - bits),
        ],
    };
    plan.launch(
        kernel,
        ctx.profile().per_element_grid(n),
        (0..width)
            .map(Binding::Input)
            .chain([
                Binding::Scalar("n", n as u32),
                Binding::Output(0),
                Binding::Output(1),
            ])
            .chain(lookup),
    );
    let compiled = ctx.plan(fingerprint_of(plan.key.0, &plan.key.1, body), || {
        Ok(vec![Kernel::build_unvalidated("query_join_probe", body)?])
    })?;
    let lookup: Vec<&Arc<dyn DeviceMemory>> = match (&built.probe, &built.table) {
        (Probe::Table { .. }, Some(starts)) => vec![starts],
        (Probe::Hash { .. }, Some(slots)) => vec![&built.keys, slots],
        _ => vec![&built.keys],
    };
    let sources: Vec<Source> = rows
        .iter()
        .chain(lookup)
        .map(|c| Source::Device(&**c))
        .collect();
    let first = ctx.backend().alloc(n * 4)?;
    let count = ctx.backend().alloc(n * 4)?;
    Run::start(ctx, plan, compiled, &sources)?.finish(
        &sources,
        vec![LaunchArg::Device(&*first), LaunchArg::Device(&*count)],
    )?;
    Ok((first, count))
}

/// The pairs of a join, in new device columns, and how many there are: the left rows'
/// first output places (an exclusive scan of their counts, at least one each for an `outer`
/// join), then the pairs: when no left row has more than [`ROW_LOOP`] matches, one work item
/// per left row writes its run; otherwise one work item per pair, which searches the places
/// for its left row, so a key with many matches does not hold up one work item. An outer
/// join's rows hold a `bool` column between the left and right columns, false (and zero
/// right values) for a left row without match. Fails with `TooLarge` past [`MAX_LEN`]
/// pairs, and as a scan or launch does.
fn pairs<A: Row, B: Row>(
    ctx: &Context,
    built: &Built,
    probed: &Probed,
    outer: bool,
) -> Result<(Columns, usize)> {
    let n = probed.n;
    let counts: [&dyn DeviceMemory; 1] = [&*probed.count];
    let places = || {
        let q = Query::<u32>::over_device(ctx, &counts, n);
        match outer {
            true => q.map(|c| c.max(1u32)),
            false => q,
        }
    };
    let total_and_most = |a: Vec<AnyVal>, b: Vec<AnyVal>| {
        let (sum_a, sum_b) = (a[0].typed::<u32>(), b[0].typed::<u32>());
        let total = select(sum_a.gt(u32::MAX - sum_b), u32::MAX, sum_a + sum_b);
        let most = a[1].typed::<u32>().max(b[1].typed::<u32>());
        vec![total.erase(), most.erase()]
    };
    let found = places().reduce_projected(
        &[ScalarValue::U32(0), ScalarValue::U32(0)],
        &total_and_most,
        &|row| vec![row[0].clone(), row[0].clone()],
        Order::Any,
    )?;
    let (total, most) = (found[0].to_bits() as usize, found[1].to_bits() as u32);
    if total > MAX_LEN {
        return Err(Error::TooLarge {
            len: total,
            max: MAX_LEN,
        });
    }
    let (offsets, _) = places().scan_exclusive(0, |a, b| a + b).into_columns()?;
    let per_row = most <= ROW_LOOP;
    let (left, right) = (Query::<A>::out_types(), Query::<B>::out_types());
    let flag: &[ScalarType] = if outer { &[ScalarType::Bool] } else { &[] };
    let out_types = [&left[..], flag, &right[..]].concat();
    let body = |k: &KernelScope| {
        let lrows = declare_columns(k, "left", &left, Access::Read);
        let order = k.buffer::<u32>("order", Access::Read);
        let rrows = declare_columns(k, "right", &right, Access::Read);
        let first = k.buffer::<u32>("first", Access::Read);
        let offsets = k.buffer::<u32>("offsets", Access::Read);
        let count = k.buffer::<u32>("count", Access::Read);
        let n = k.value::<u32>("n");
        let total = k.value::<u32>("total");
        let outs = declare_columns(k, "out", &out_types, Access::Write);
        // Writes the pair of left row `i` (its values `lvals`) and its match `j` at place
        // `p` (for an outer join, the row alone when it has no match).
        let write = |i: Val<u32>, lvals: &[AnyVal], j: Val<u32>, p: Val<u32>| {
            let r = order.load(first.load(i) + j);
            let mut vals = lvals.to_vec();
            let matched = load_row(&rrows, &right, r);
            match outer {
                true => {
                    let there = count.load(i).gt(0u32).erase();
                    vals.push(there.clone());
                    vals.extend(matched.iter().zip(&right).map(|(v, t)| {
                        let zero = lit_value(ScalarValue::zero(*t));
                        select_dyn(&there, v, &zero)
                    }));
                }
                false => vals.extend(matched),
            }
            for (o, v) in outs.iter().zip(&vals) {
                store_dyn(*o, p, v);
            }
        };
        let g = global_id(Axis::X);
        match per_row {
            true => if_then(g.lt(n), || {
                let lvals = load_row(&lrows, &left, g);
                let c = count.load(g);
                let runs = if outer { c.max(1u32) } else { c };
                let base = offsets.load(g);
                for_range(0u32, runs, |j| write(g, &lvals, j, base + j));
            }),
            false => if_then(g.lt(total), || {
                // The left row: the last whose first place is not past `g`.
                let i = search(offsets, n, g, true) - 1u32;
                let lvals = load_row(&lrows, &left, i);
                write(i, &lvals, g - offsets.load(i), g);
            }),
        }
    };
    let mut plan = Plan::new(
        "join pairs",
        ctx.profile(),
        ("query_join_pairs", [outer as u32, per_row as u32, 0]),
        Rows::Known(total),
    );
    let kernel = plan.kernel("query_join_pairs");
    let inputs = left.len() + 1 + right.len() + 3;
    let items = if per_row { n } else { total };
    plan.launch(
        kernel,
        ctx.profile().per_element_grid(items),
        (0..inputs)
            .map(Binding::Input)
            .chain([
                Binding::Scalar("n", n as u32),
                Binding::Scalar("total", total as u32),
            ])
            .chain((0..out_types.len()).map(Binding::Output)),
    );
    let compiled = ctx.plan(fingerprint_of(plan.key.0, &plan.key.1, body), || {
        Ok(vec![Kernel::build_unvalidated("query_join_pairs", body)?])
    })?;
    let sources: Vec<Source> = probed
        .rows
        .iter()
        .chain([&built.order])
        .chain(&built.rows)
        .chain([&probed.first, &offsets[0], &probed.count])
        .map(|c| Source::Device(&**c))
        .collect();
    let outs = alloc_rows(ctx, &out_types, total)?;
    Run::start(ctx, plan, compiled, &sources)?.finish(
        &sources,
        outs.iter().map(|m| LaunchArg::Device(&**m)).collect(),
    )?;
    Ok((outs, total))
}
