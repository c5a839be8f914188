//! What a query would run: `emit` (the kernels' source in any target) and `explain` (the
//! fused plan and its kernels).

use super::*;

impl<'a, T: Row> Query<'a, T> {
    /// The kernels `to_vec` would run, in `target`'s language, one after another.
    pub fn emit(&self, target: crate::Target) -> Result<String> {
        let kernels = if self.has_filter() {
            self.filter_kernels()?.to_vec()
        } else {
            vec![self.map_kernel(self.map_shape().0)?]
        };
        let mut out = String::new();
        for k in &kernels {
            out += &crate::emit(k, target)?;
            out.push('\n');
        }
        Ok(out)
    }

    /// The fused plan and the IR of its kernels, as `to_vec` would run them, followed by the
    /// source the context's backend compiles when that is not the IR.
    pub fn explain(&self) -> String {
        let mut s = format!(
            "plan on {} ({}):\n  source: {} element(s), column types [",
            self.ctx.device().backend,
            self.ctx.device().name,
            self.len
        );
        s += &self.columns[..self.base_columns]
            .iter()
            .map(|c| c.1.name())
            .collect::<Vec<_>>()
            .join(", ");
        s += "]\n  fused stages: ";
        s += &self
            .stages
            .iter()
            .map(|st| st.name())
            .collect::<Vec<_>>()
            .join(" -> ");
        let kernels = if self.has_filter() {
            self.filter_kernels().map(|k| k.to_vec())
        } else {
            self.map_kernel(self.map_shape().0).map(|k| vec![k])
        };
        match kernels {
            Ok(ks) => {
                s += &format!(
                    "\n  to_vec runs {} kernel(s): {}\n",
                    ks.len(),
                    ks.iter()
                        .map(|k| k.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                s += "  a terminal reduction runs 2 kernels (query_reduce_partials, query_reduce_final) around the same element function\n";
                for k in ks {
                    s += &format!("\n{}", print_kernel(&k));
                }
            }
            Err(e) => s += &format!("\n  cannot build kernels: {e}\n"),
        }
        let target = crate::Target::of(self.ctx.device().backend);
        if target != crate::Target::Ir {
            match self.emit(target) {
                Ok(src) => s += &format!("\n--- {target:?} source ---\n{src}"),
                Err(e) => s += &format!("\n--- {target:?} source unavailable: {e}\n"),
            }
        }
        s
    }
}
