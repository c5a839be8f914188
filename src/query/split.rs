//! Struct buffers as query sources: a `Buffer` of `#[derive(kiln::Value)]` structs holds them
//! side by side (array-of-structs); a query reads columns, so one kernel splits the buffer
//! into one device column per scalar leaf when the query is made.

use super::*;
use crate::struct_row::leaf_values;

impl Context {
    /// Starts a query over a buffer in device memory (`&buffer`, or a [`BufferSlice`] of
    /// one: `b.slice(10..20)?`); the query runs where the data is. A buffer of scalars is
    /// read where it is; a buffer of `#[derive(kiln::Value)]` structs is first split on the
    /// device into one column per scalar field (one kernel, when this is called; `explain`
    /// says so). A buffer of another context makes the terminal fail with `Unsupported`.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let b = ctx.upload(&[1u32, 2, 3, 4])?;
    /// assert_eq!(ctx.from_buffer(&b).map(|x| x * 10).to_vec()?, [10, 20, 30, 40]);
    /// #[derive(Clone, Copy, Debug, PartialEq, kiln::Value)]
    /// #[repr(C)]
    /// struct Hit {
    ///     energy: f32,
    ///     layer: u32,
    /// }
    /// let hits = ctx.upload(&[Hit { energy: 1.5, layer: 2 }, Hit { energy: 4.0, layer: 0 }])?;
    /// let deep = ctx.from_buffer(&hits).filter(|h| h.layer.gt(0)).map(|h| h.energy).sum()?;
    /// assert_eq!(deep, 1.5);
    /// let xs = ctx.upload(&[5i32, -2, 7, 1, -9])?;
    /// assert_eq!(ctx.from_buffer(xs.slice(1..4)?).max()?, Some(7));
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn from_buffer<'a, T: Row + IrType>(
        &self,
        b: impl Into<BufferSlice<'a, T>>,
    ) -> Query<'a, T> {
        let b = b.into();
        if let Err(e) = self.check_device(b.backend()) {
            return Query::failed(self, e);
        }
        let types = Query::<T>::out_types();
        if matches!(T::ir_type(), Type::Scalar(_)) {
            return Query::over_sources(self, [Source::Owned(b.memory().clone())], b.len());
        }
        match split(self, &b, &types) {
            Ok(columns) => {
                let mut q =
                    Query::over_sources(self, columns.into_iter().map(Source::Owned), b.len());
                q.ran.push(format!(
                    "split: {} structs into {} columns (query_split_rows)",
                    b.len(),
                    types.len()
                ));
                q
            }
            Err(e) => Query::failed(self, e),
        }
    }
}

/// One device column per leaf of `T` (of `types`), written from the structs of `b`.
fn split<T: IrType>(ctx: &Context, b: &BufferSlice<T>, types: &[ScalarType]) -> Result<Columns> {
    let n = b.len();
    let body = |k: &KernelScope| {
        let rows = k.buffer::<T>("rows", Access::Read);
        let count = k.value::<u32>("n");
        let outs = declare_columns(k, "out", types, Access::Write);
        let i = global_id(Axis::X);
        if_then(i.lt(count), || {
            let mut leaves = Vec::new();
            leaf_values(rows.load(i).erase(), &mut leaves);
            for (out, v) in outs.iter().zip(&leaves) {
                store_dyn(*out, i, v);
            }
        });
    };
    let mut plan = Plan::new(
        "split rows",
        ctx.profile(),
        ("query_split_rows", [0; 3]),
        Rows::Known(n),
    );
    let kernel = plan.kernel("query_split_rows");
    let outputs = (0..types.len()).map(Binding::Output);
    plan.launch(
        kernel,
        ctx.profile().per_element_grid(n),
        [Binding::Input(0), Binding::Scalar("n", n as u32)]
            .into_iter()
            .chain(outputs),
    );
    let compiled = ctx.plan(fingerprint_of(plan.key.0, &plan.key.1, body), || {
        Ok(vec![Kernel::build_unvalidated("query_split_rows", body)?])
    })?;
    let columns = alloc_rows(ctx, types, n)?;
    let sources = [Source::Device(&**b.memory())];
    let outs = columns.iter().map(|c| LaunchArg::Device(&**c)).collect();
    Run::start(ctx, plan, compiled, &sources)?.finish(&sources, outs)?;
    Ok(columns)
}
