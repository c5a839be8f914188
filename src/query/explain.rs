//! What a query would run: `emit` (the kernels' source in any target) and `explain` (the
//! plans the device runs and their kernels).

use super::reduce::reduce_plan;
use super::*;

impl<'a, T: Row> Query<'a, T> {
    /// The kernels `to_vec` would run on the context's device, in `target`'s language, one
    /// after another.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let q = ctx.from(&[1.0f32, -2.0]).filter(|x| x.gt(0.0)).map(|x| x * 2.0);
    /// let opencl = q.emit(Target::OpenClC)?;
    /// assert!(opencl.contains("__kernel"));
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn emit(&self, target: crate::Target) -> Result<String> {
        let plan = self.materialize_plan(&self.ctx.profile());
        let mut out = String::new();
        for k in &self.materialize_kernels(&plan)? {
            out += &crate::emit(k, target)?;
            out.push('\n');
        }
        Ok(out)
    }

    /// What the query runs on the context's device ([`Query::explain_on`] its profile),
    /// followed by the source its backend compiles when that is not the IR.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let q = ctx.from(&[1.0f32, -2.0]).filter(|x| x.gt(0.0)).map(|x| x * 2.0);
    /// let plan = q.explain();
    /// assert!(plan.contains("fused stages: filter -> map"), "{plan}");
    /// assert!(plan.contains("to_vec plan (chunked)"), "{plan}");
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn explain(&self) -> String {
        let mut s = device_line(&self.ctx) + &self.explain_on(&self.ctx.profile());
        let target = crate::Target::of(self.ctx.device().backend);
        if target != crate::Target::Ir {
            match self.emit(target) {
                Ok(src) => s += &format!("\n--- {target:?} source ---\n{src}"),
                Err(e) => s += &format!("\n--- {target:?} source unavailable: {e}\n"),
            }
        }
        s
    }

    /// What the query would run on a device of `profile`, without running anything: the
    /// source and the fused stages, the plan of `to_vec` (kernels, temporaries, each launch
    /// with its grid and bindings, host steps), the plan of a commutative reduction of the
    /// rows (`sum`, `min`, `max`, ...), and the IR of `to_vec`'s kernels.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let xs = [1.0f32, -2.0, 3.0];
    /// let q = ctx.from(&xs).filter(|x| x.gt(0.0));
    /// let gpu = kiln::DeviceProfile { shape: kiln::PlanShape::Grouped, ..ctx.profile() };
    /// assert!(q.explain_on(&gpu).contains("launch query_filter_scatter_grouped"));
    /// assert!(q.explain_on(&ctx.profile()).contains("launch query_filter_scatter on"));
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn explain_on(&self, profile: &DeviceProfile) -> String {
        let mut s = self.describe_source();
        let plan = self.materialize_plan(profile);
        s += &format!("\n\n{plan}");
        let reduce = reduce_plan(
            profile,
            self.columns.len(),
            self.len,
            &Self::out_types(),
            Order::Any,
        );
        s += &format!("\n{reduce}");
        match self.materialize_kernels(&plan) {
            Ok(ks) => {
                for k in ks {
                    s += &format!("\n{}", print_kernel(&k));
                }
            }
            Err(e) => s += &format!("\ncannot build kernels: {e}\n"),
        }
        s
    }

    /// The query's source and fused stages, the first lines of every explanation.
    pub(super) fn describe_source(&self) -> String {
        let types: Vec<&str> = self.columns[..self.base_columns]
            .iter()
            .map(|c| c.ty.name())
            .collect();
        let stages: Vec<&str> = self.stages.iter().map(|st| st.name()).collect();
        let mut ran: String = self
            .ran
            .iter()
            .map(|r| format!("ran when built: {r}\n"))
            .collect();
        if let Some(e) = &self.error {
            ran += &format!("the query's terminal will fail: {e}\n");
        }
        format!(
            "{ran}source: {} element(s), column types [{}]\nfused stages: {}",
            self.source_len(),
            types.join(", "),
            stages.join(" -> ")
        )
    }
}

/// The first line of every `explain()`: the context's backend and device name, and the
/// compile options it set, if any.
pub(super) fn device_line(ctx: &Context) -> String {
    let device = ctx.device();
    let options = ctx.compile_options();
    let options = match options.is_default() {
        true => String::new(),
        false => format!("\ncompile options: {options}"),
    };
    format!("device: {} ({}){options}\n", device.backend, device.name)
}
