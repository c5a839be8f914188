//! What a grouping or `distinct` would run, printed without running anything. Which path a
//! grouping takes depends on its keys, which only a run sees, so the explanation prints each
//! path a run can take and the condition that picks it.

use super::*;
use crate::query::histogram::histogram_plan;
use crate::query::materialize::materialize_plan;
use crate::query::reduce::reduce_plan;

impl<K: Row, T: Row> GroupBy<'_, K, T> {
    /// What the grouping's `count()` would run on the context's device
    /// ([`GroupBy::explain_on`] its profile).
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let plan = ctx.from(&[3u8, 1, 3]).group_by(|k| k).explain();
    /// assert!(plan.starts_with("device: cpu"), "{plan}");
    /// assert!(plan.contains("launch query_group_dense_partials"), "{plan}");
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn explain(&self) -> String {
        device_line(&self.query.ctx) + &self.explain_on(&self.query.ctx.profile())
    }

    /// What the grouping's `count()` would run on a device of `profile`, without running
    /// anything: the source and the fused stages, then each path a run can take and what
    /// picks it. Integer keys first reduce to their smallest and largest (8-bit keys skip
    /// this); when those span at most 1024 values, the dense plan folds the rows without a
    /// sort (shown for the widest span its type allows); a key wider than 8 bits spanning at
    /// most 2^20 values is counted by a histogram of its offset from the smallest key (shown
    /// for 2^20 bins; `count()` only: where plans are chunked the other folds take the dense
    /// plan up to 2^20 values, on grouped plans they sort). Tuples of integers reduce to the
    /// smallest and largest of each part, and take the dense plan when the parts' spans
    /// multiply to at most 1024. Otherwise, and for keys with a float part, the
    /// sort path runs: the keys written to device columns, sorted, their runs marked, and each
    /// run's end kept. Plans after the first are shown for as many rows as the source has; a
    /// run makes them for the rows a filter keeps. `sum`, `min`, `max`, `average` and `fold`
    /// take the same paths with their value columns beside the keys, and on the sort path a
    /// segmented scan of the values (a scan plan) between marking the runs and keeping their
    /// ends.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let shop = [3u32, 1, 3, 2, 1];
    /// let plan = ctx.from(&shop).group_by(|s| s).explain_on(&ctx.profile());
    /// assert!(plan.contains("launch query_group_dense_partials"));
    /// assert!(plan.contains("launch query_group_runs"));
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn explain_on(&self, profile: &DeviceProfile) -> String {
        let q = &self.query;
        let (types, n, inputs) = (key_types::<K>(), q.len, q.columns.len());
        let names: Vec<&str> = types.iter().map(|t| t.name()).collect();
        let key = match names[..] {
            [one] => one.to_string(),
            _ => format!("({})", names.join(", ")),
        };
        let mut s = format!(
            "{}\ngroup_by: one {key} key per row; shown for count()\n",
            q.describe_source(),
        );
        if !types.iter().all(|t| t.is_int()) {
            s += "\nfloat keys: the sort path\n";
        } else {
            s += &unsorted_paths(profile, &types, n, inputs);
        }
        let flagged = Query::<(u32, K)>::shape_only(&q.ctx, n);
        s + &sort_path::<K>(&q.ctx, profile, (inputs, q.has_filter()), n)
            + &run_end_positions(flagged)
                .materialize_plan(profile)
                .to_string()
    }
}

impl<T: Numeric + Row> Distinct<'_, T> {
    /// What `to_vec` would run on the context's device ([`Distinct::explain_on`] its profile).
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let plan = ctx.from(&[9i64, 4, 9]).distinct().explain();
    /// assert!(plan.starts_with("device: cpu"), "{plan}");
    /// assert!(plan.contains("launch query_group_runs"), "{plan}");
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn explain(&self) -> String {
        device_line(&self.query.ctx) + &self.explain_on(&self.query.ctx.profile())
    }

    /// What `to_vec` would run on a device of `profile`, without running anything: the source
    /// and the fused stages; for integer elements the paths that count them without a sort
    /// (as [`GroupBy::explain_on`] shows them for one key); then the sort path: the elements
    /// written to device columns, sorted, their runs marked, and each run's last element kept.
    /// Plans after the first are shown for as many elements as the source has; a run makes
    /// them for those a filter keeps.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let plan = ctx.from(&[2.0f32, 1.0, 2.0]).distinct().explain_on(&ctx.profile());
    /// assert!(plan.contains("launch query_group_runs"));
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn explain_on(&self, profile: &DeviceProfile) -> String {
        let q = &self.query;
        let n = q.len;
        let flagged = Query::<(u32, T)>::shape_only(&q.ctx, n);
        let inputs = q.columns.len();
        let unsorted = match T::TYPE.is_int() {
            true => unsorted_paths(profile, &[T::TYPE], n, inputs) + "\n",
            false => String::new(),
        };
        format!("{}\ndistinct\n{unsorted}\n", q.describe_source())
            + &sort_path::<T>(&q.ctx, profile, (inputs, q.has_filter()), n)
            + &run_ends(flagged).materialize_plan(profile).to_string()
    }
}

/// The paths a `count()` by integer keys of `types` (one per part) over `n` rows from
/// `inputs` columns takes before the sort path, numbered, each with what picks it, and the
/// sort path's place after them.
fn unsorted_paths(
    profile: &DeviceProfile,
    types: &[ScalarType],
    n: usize,
    inputs: usize,
) -> String {
    let mut s = String::new();
    let span = if matches!(types[..], [ty] if ty.bits() == 8) {
        1 << 8
    } else {
        s += match types.len() {
            1 => "\n1. the smallest and largest key\n",
            _ => "\n1. the smallest and largest of each part\n",
        };
        for group in types.chunks(RANGES_PER_REDUCTION) {
            let both: Vec<ScalarType> = group.iter().flat_map(|t| [*t, *t]).collect();
            s += &reduce_plan(profile, inputs, n, &both, Order::Any).to_string();
        }
        DENSE_KEYS
    };
    s += &match types.len() {
        1 => format!("\n2. when the keys span at most {DENSE_KEYS} values: the dense plan, shown for {span}\n"),
        _ => format!("\n2. when the parts' spans multiply to at most {DENSE_KEYS}: the dense plan, by each key's index in mixed radix, shown for {span}\n"),
    };
    s += &match dense_chunk_on(profile, n, span) {
        Some(chunk) => {
            dense_plan(profile, inputs, n, chunk, span, &[ScalarType::U32], FoldOp::Adds)
                .0
                .to_string()
        }
        None => format!("  none: no chunk length keeps {span} keys' loops within this device's loop budget, so such keys take the sort path\n"),
    };
    if matches!(types[..], [ty] if ty.bits() > 8) {
        s += &format!("\n3. when they span at most {HISTOGRAM_KEYS} values: a histogram of each key's offset from the smallest, shown for {HISTOGRAM_KEYS}\n");
        s += &histogram_plan(profile, inputs, n, HISTOGRAM_KEYS)
            .0
            .to_string();
        s += "\n4. otherwise: the sort path\n";
    } else {
        s += "\n3. otherwise: the sort path\n";
    }
    s
}

/// The plans of the sort path up to marking the runs, for `n` keys of type `K` (a column
/// per part) from a query with `source.0` input columns and (when `source.1`) a filter: the
/// keys written to device columns, their sort, and the runs kernel.
fn sort_path<K: Row>(
    ctx: &Context,
    profile: &DeviceProfile,
    source: (usize, bool),
    n: usize,
) -> String {
    let types = key_types::<K>();
    let keys = materialize_plan(profile, source.0, types.len(), n, source.1);
    let sort = Query::<K>::shape_only(ctx, n)
        .sorted_by_first_columns(&types, false)
        .passes_plan(profile, n);
    format!("{keys}\n{sort}\n{}\n", runs_plan(profile, types.len(), n))
}
