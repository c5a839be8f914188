//! Compile options: how a backend's compiler treats one kernel, beyond the IR itself.

/// How a kernel is compiled: part of the kernel (so of its structural hash, and so of every
/// cache key), read by each backend when it writes and compiles the kernel. Every field is
/// "not set" by default; a field left unset takes the context's setting, and a kernel with
/// nothing set compiles as kiln always does (IEEE results that match the CPU backend).
///
/// ```
/// use kiln_ir::CompileOptions;
/// let o = CompileOptions::new().fast_math(true).launch_bounds(128);
/// assert_eq!((o.fast_math, o.launch_bounds, o.max_registers), (Some(true), Some(128), None));
/// // Unset fields are filled from another set of options (a context's); set ones stay.
/// let ctx = CompileOptions::new().fast_math(false).max_registers(64);
/// let merged = o.or(&ctx);
/// assert_eq!(merged, CompileOptions::new().fast_math(true).launch_bounds(128).max_registers(64));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CompileOptions {
    /// Relaxed floating-point math: the compiler may reassociate, contract into fused
    /// multiply-adds, flush denormals to zero and use approximate division, square root and
    /// transcendentals (CUDA `--use_fast_math`, OpenCL `-cl-fast-relaxed-math`). Results of
    /// float arithmetic then differ from plain Rust in the last bits, and more near denormals,
    /// infinities and NaN. `None`: the context's setting (off unless it set one).
    pub fast_math: Option<bool>,
    /// The most work items per group any launch of the kernel uses. CUDA compiles the kernel
    /// with `__launch_bounds__`, which lets it keep more values in registers; every backend
    /// refuses a launch with larger groups.
    pub launch_bounds: Option<u32>,
    /// The most registers per work item the compiler may use (CUDA `--maxrregcount`): more
    /// groups fit on a multiprocessor at once, at the cost of spilling values to memory.
    pub max_registers: Option<u32>,
}

impl CompileOptions {
    /// Nothing set.
    pub fn new() -> CompileOptions {
        CompileOptions::default()
    }

    /// These options with [`CompileOptions::fast_math`] set to `on`.
    pub fn fast_math(mut self, on: bool) -> CompileOptions {
        self.fast_math = Some(on);
        self
    }

    /// These options with [`CompileOptions::launch_bounds`] set to `work_items`.
    pub fn launch_bounds(mut self, work_items: u32) -> CompileOptions {
        self.launch_bounds = Some(work_items);
        self
    }

    /// These options with [`CompileOptions::max_registers`] set to `registers`.
    pub fn max_registers(mut self, registers: u32) -> CompileOptions {
        self.max_registers = Some(registers);
        self
    }

    /// These options, with each field they leave unset taken from `fallback`.
    pub fn or(&self, fallback: &CompileOptions) -> CompileOptions {
        CompileOptions {
            fast_math: self.fast_math.or(fallback.fast_math),
            launch_bounds: self.launch_bounds.or(fallback.launch_bounds),
            max_registers: self.max_registers.or(fallback.max_registers),
        }
    }

    /// True when relaxed floating-point math is on.
    pub fn relaxed_math(&self) -> bool {
        self.fast_math == Some(true)
    }

    /// True when nothing is set.
    pub fn is_default(&self) -> bool {
        *self == CompileOptions::default()
    }
}

/// The fields that are set, as `fast_math = true, launch_bounds = 128` (empty when none is).
impl std::fmt::Display for CompileOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let set = [
            ("fast_math", self.fast_math.map(|v| v.to_string())),
            ("launch_bounds", self.launch_bounds.map(|v| v.to_string())),
            ("max_registers", self.max_registers.map(|v| v.to_string())),
        ];
        let set: Vec<String> = set
            .into_iter()
            .filter_map(|(name, v)| Some(format!("{name} = {}", v?)))
            .collect();
        f.write_str(&set.join(", "))
    }
}
