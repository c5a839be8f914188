//! Fusion: a query's stages (maps, filters, `enumerate`, `zip`, windows, `reverse`,
//! `flat_map`) become one element function, emitted into whichever kernel a terminal's plan
//! builds: with a branch per filter ([`Query::element`]) or, for cheap filtering chains,
//! without branches ([`Query::element_predicated`]).

use super::concat::Piece;
use super::{fold_into, select_dyn, CombineFn, Layout, Query, Stage};
use kiln_ir::*;

/// Expressions of a filtering query's element function up to which the chunked plan runs it
/// on every element without branches ([`Query::predicated`]).
const PREDICATED_EXPRS: usize = 96;

/// A kernel's input columns: every one, as the element function reads them, and those whose
/// lengths bound its elements (all but bit columns, which hold eight elements a byte and
/// whose loads past their end read zero).
pub(super) struct Inputs {
    pub(super) all: Vec<Memory>,
    pub(super) bounding: Vec<Memory>,
}

impl Inputs {
    /// Columns of one value per element: each bounds the elements.
    pub(super) fn values(all: Vec<Memory>) -> Inputs {
        Inputs {
            bounding: all.clone(),
            all,
        }
    }
}

/// The name of input column `c`'s parameter: `in0`, `in1`, ... (the first eight without
/// an allocation: a cached query declares them on every call).
fn input_name(c: usize) -> std::borrow::Cow<'static, str> {
    const NAMES: [&str; 8] = ["in0", "in1", "in2", "in3", "in4", "in5", "in6", "in7"];
    match NAMES.get(c) {
        Some(name) => (*name).into(),
        None => format!("in{c}").into(),
    }
}

impl<'a, T> Query<'a, T> {
    /// Whether source row `i` is inside the window of stage `s` (`start..end`). The bounds are
    /// user code's constants, so a query run again with other bounds reuses its kernels.
    pub(super) fn in_window(s: usize, start: u32, end: u32, i: Val<u32>) -> Val<bool> {
        constants::user_code(s as u32, || i.ge(start).and(i.lt(end)))
    }

    /// Emits the fused element function for source index `i` and hands each surviving
    /// element's column values to `sink`.
    pub(super) fn element(&self, cols: &[Memory], i: Val<u32>, sink: &mut dyn FnMut(Vec<AnyVal>)) {
        self.element_from(&|c| self.column(cols, c, i), i, sink);
    }

    /// [`Self::element`] with input column `c`'s value at `i` given by `column(c)`, so a
    /// kernel can load its elements' columns before it runs their stages.
    pub(super) fn element_from(
        &self,
        column: &dyn Fn(usize) -> AnyVal,
        i: Val<u32>,
        sink: &mut dyn FnMut(Vec<AnyVal>),
    ) {
        let vals = (0..self.base_columns).map(column).collect();
        self.apply(0, vals, column, i, sink);
    }

    /// The row that stage `s` sees at position `i`: `i` divided by the `max` of the
    /// expansions (`flat_map`) from `s` on, then, after an odd number of `reverse` stages
    /// from `s` on, `len - 1 - i` (`len` the source's, user code's constant, so a query over
    /// another length reuses its kernels). Reversals come before expansions: a `reverse`
    /// after a `flat_map` starts a new query ([`Query::kept_rows`]).
    pub(super) fn row_at(&self, s: usize, i: Val<u32>) -> Val<u32> {
        let spread = self.spread_from(s);
        let i = if spread > 1 { i / spread } else { i };
        let mut reversals =
            (s..self.stages.len()).filter(|&t| matches!(self.stages[t], Stage::Reverse));
        match reversals.next() {
            Some(first) if reversals.count() % 2 == 0 => {
                let last = (self.source_len() as u32).wrapping_sub(1);
                constants::user_code(first as u32, || lit(last)) - i
            }
            _ => i,
        }
    }

    /// Element `i` of input column `c` (row [`Self::row_at`] of the stage that reads it).
    pub(super) fn column(&self, cols: &[Memory], c: usize, i: Val<u32>) -> AnyVal {
        let reader = self
            .stages
            .iter()
            .position(|s| matches!(s, Stage::Zip(z) if *z == c))
            .unwrap_or(0);
        self.load_chained(cols, c, self.row_at(reader, i))
    }

    /// The value input column `c` holds at index `i`, read as its layout says.
    pub(super) fn load_layout(&self, cols: &[Memory], c: usize, i: Val<u32>) -> AnyVal {
        let input = &self.columns[c];
        match input.layout {
            Layout::Values => load_dyn(cols[c], i, Type::Scalar(input.ty)),
            Layout::Bits { shift } => {
                let at = i + shift;
                let byte = load_dyn(cols[c], at >> 3u32, Type::Scalar(ScalarType::U8));
                let bit = (byte.typed::<u8>().cast::<u32>() >> (at & 7u32)) & 1u32;
                bit.cast::<u8>().erase()
            }
        }
    }

    /// The fused element function for source index `i` without branches: every stage runs on
    /// every element (IR operations are total, so this is safe) and `keep` is true when every
    /// filter keeps it. Returns `keep` and the element's column values.
    pub(super) fn element_predicated(
        &self,
        cols: &[Memory],
        i: Val<u32>,
    ) -> (Val<bool>, Vec<AnyVal>) {
        let mut vals: Vec<AnyVal> = (0..self.base_columns)
            .map(|c| self.column(cols, c, i))
            .collect();
        let mut keep: Option<Val<bool>> = None;
        for (s, stage) in self.stages.iter().enumerate() {
            match stage {
                Stage::Map(f) => vals = f(vals),
                Stage::Filter(p) => {
                    let kept = p(vals.clone());
                    keep = Some(keep.map_or(kept, |k| k.and(kept)));
                }
                Stage::Enumerate => vals.insert(0, self.row_at(s, i).erase()),
                Stage::Zip(c) => vals.push(self.column(cols, *c, i)),
                Stage::Window { start, end } => {
                    let kept = Self::in_window(s, *start, *end, self.row_at(s, i));
                    keep = Some(keep.map_or(kept, |k| k.and(kept)));
                }
                Stage::Reverse => {}
                Stage::Expand { max } => vals.push((self.row_at(s + 1, i) % *max).erase()),
            }
        }
        (keep.unwrap_or_else(|| lit(true)), vals)
    }

    /// True when the query filters and its whole element function is cheap enough to run on
    /// every element, dropped or not ([`Self::element_predicated`]), so that a predicate
    /// keeping elements at random costs no mispredicted branches: no loops, in the element
    /// function or in a device function it calls, and at most [`PREDICATED_EXPRS`]
    /// expressions. Where a filter drops most elements before costly stages, the branch
    /// skips them instead.
    pub(super) fn predicated(&self) -> bool {
        if !self.has_filter() {
            return false;
        }
        let probe = Kernel::build_unvalidated("query_element", |k| {
            let cols = self.declare_inputs(k).all;
            self.element_predicated(&cols, global_id(Axis::X));
        });
        probe.is_ok_and(|k| {
            k.body.exprs.len() <= PREDICATED_EXPRS
                && !block_has_loop(&k.body.block)
                && !k.functions.iter().any(|f| block_has_loop(&f.body.block))
        })
    }

    /// Folds `project` of element `i`, if the filters keep it, into the accumulators `acc`
    /// with `op`. When `predicated` ([`Self::predicated`]) without a branch: the element
    /// function runs on every element and a select keeps the accumulators of a dropped one.
    pub(super) fn fold_element(
        &self,
        cols: &[Memory],
        i: Val<u32>,
        acc: &[AnyVar],
        op: CombineFn<'_>,
        project: &dyn Fn(Vec<AnyVal>) -> Vec<AnyVal>,
        predicated: bool,
    ) {
        if !predicated {
            return self.element(cols, i, &mut |vals| fold_into(acc, project(vals), op));
        }
        let (keep, vals) = self.element_predicated(cols, i);
        let keep = keep.erase();
        let cur: Vec<AnyVal> = acc.iter().map(|v| v.get()).collect();
        for ((a, next), old) in acc.iter().zip(op(cur.clone(), project(vals))).zip(&cur) {
            a.set(&select_dyn(&keep, &next, old));
        }
    }

    pub(super) fn apply(
        &self,
        s: usize,
        mut vals: Vec<AnyVal>,
        column: &dyn Fn(usize) -> AnyVal,
        i: Val<u32>,
        sink: &mut dyn FnMut(Vec<AnyVal>),
    ) {
        match self.stages.get(s) {
            None => sink(vals),
            Some(Stage::Map(f)) => self.apply(s + 1, f(vals), column, i, sink),
            Some(Stage::Filter(p)) => {
                let keep = p(vals.clone());
                if_then(keep, || self.apply(s + 1, vals, column, i, sink));
            }
            Some(Stage::Enumerate) => {
                vals.insert(0, self.row_at(s, i).erase());
                self.apply(s + 1, vals, column, i, sink)
            }
            Some(Stage::Zip(c)) => {
                vals.push(column(*c));
                self.apply(s + 1, vals, column, i, sink)
            }
            Some(Stage::Window { start, end }) => {
                let keep = Self::in_window(s, *start, *end, self.row_at(s, i));
                if_then(keep, || self.apply(s + 1, vals, column, i, sink));
            }
            Some(Stage::Reverse) => self.apply(s + 1, vals, column, i, sink),
            Some(Stage::Expand { max }) => {
                vals.push((self.row_at(s + 1, i) % *max).erase());
                self.apply(s + 1, vals, column, i, sink)
            }
        }
    }

    /// One read-only buffer parameter per input column, `in0`, `in1`, ...
    pub(super) fn declare_inputs(&self, k: &KernelScope) -> Inputs {
        let all: Vec<Memory> = self
            .columns
            .iter()
            .enumerate()
            .map(|(c, input)| k.buffer_dyn(&input_name(c), Type::Scalar(input.ty), Access::Read))
            .collect();
        let bounding = all
            .iter()
            .zip(&self.columns)
            .filter(|(_, input)| input.layout == Layout::Values && input.piece == Piece::Whole)
            .filter(|_| self.spread_from(0) == 1)
            .map(|(m, _)| *m)
            .collect();
        Inputs { all, bounding }
    }
}
