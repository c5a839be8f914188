//! Where kernels keep their data in C: buffers, shared arrays (CUDA's dynamic region
//! included) and private locals, and how an element of a buffer or shared array is read or
//! written.

use crate::*;

use std::fmt::Write as _;

/// The most bytes of fixed-size `__shared__` arrays a CUDA block may declare; ptxas refuses
/// more, although devices since Volta offer more to blocks that opt in at launch.
pub const CUDA_STATIC_SHARED_LIMIT: u64 = 48 * 1024;

/// True when the CUDA writer places `kernel`'s fixed-size shared arrays in the dynamic region
/// as well (each at the next 16-byte boundary, in declaration order, before any dynamic one
/// that follows it): they add up to more than [`CUDA_STATIC_SHARED_LIMIT`].
pub fn cuda_fixed_shared_in_dynamic_region(kernel: &Kernel) -> bool {
    let fixed: u64 = kernel
        .shared
        .iter()
        .filter_map(|s| match s.len {
            SharedLen::Static(n) => Some(n as u64 * s.elem.size() as u64),
            SharedLen::Dynamic => None,
        })
        .sum();
    fixed > CUDA_STATIC_SHARED_LIMIT
}

/// True when the CUDA writer declares `kernel`'s extern shared array: it has a dynamic shared
/// array, or its fixed-size ones are placed there ([`cuda_fixed_shared_in_dynamic_region`]).
pub fn cuda_uses_dynamic_region(kernel: &Kernel) -> bool {
    kernel.shared.iter().any(|s| s.len == SharedLen::Dynamic)
        || cuda_fixed_shared_in_dynamic_region(kernel)
}

/// Bytes of dynamic shared memory a CUDA launch of `kernel` needs when its shared arrays have
/// `lengths` elements (in declaration order): each array in the region starts at a 16-byte
/// boundary of the one extern array the writer declares. The region holds the dynamic arrays,
/// and the fixed-size ones too where [`cuda_fixed_shared_in_dynamic_region`] says so.
pub fn dynamic_shared_bytes(kernel: &Kernel, lengths: &[u32]) -> u64 {
    let fixed_too = cuda_fixed_shared_in_dynamic_region(kernel);
    kernel
        .shared
        .iter()
        .zip(lengths)
        .filter(|(s, _)| fixed_too || s.len == SharedLen::Dynamic)
        .map(|(s, &n)| (n as u64 * s.elem.size() as u64).div_ceil(16) * 16)
        .sum()
}

pub(crate) fn mem_info(k: &Kernel, m: Memory) -> W<(String, Type)> {
    match m {
        Memory::Buffer(i) => match k.params.get(i as usize) {
            Some(Param {
                name,
                kind: ParamKind::Buffer { elem, .. },
            }) => Ok((name.clone(), elem.clone())),
            _ => err(format!("parameter {i} is not a buffer")),
        },
        Memory::Shared(i) => k
            .shared
            .get(i as usize)
            .map(|s| (s.name.clone(), s.elem.clone()))
            .ok_or_else(|| WriteError(format!("no shared array {i}"))),
    }
}

impl Writer {
    pub(crate) fn locals(&mut self, cx: &Cx, out: &mut String) -> W<()> {
        for (i, l) in cx.body.locals.iter().enumerate() {
            match &l.ty {
                Type::Array(e, n) => {
                    let comps = e.flatten().len();
                    for (c, (s, _)) in e.flatten().into_iter().enumerate() {
                        let name = if comps == 1 {
                            cx.local_name(i)
                        } else {
                            format!("{}_{c}", cx.local_name(i))
                        };
                        let _ = writeln!(out, "  {} {name}[{}] = {{0}};", self.t(s), (*n).max(1));
                    }
                }
                t => {
                    for (c, (s, _)) in t.flatten().into_iter().enumerate() {
                        let _ = writeln!(
                            out,
                            "  {} {} = {};",
                            self.t(s),
                            component_name(&cx.local_name(i), c, t.flatten().len()),
                            self.lit(ScalarValue::zero(s))
                        );
                    }
                }
            }
        }
        Ok(())
    }

    /// An lvalue/rvalue for component `off` of element `i` of a memory.
    pub(crate) fn elem_ref(
        &self,
        name: &str,
        elem: &Type,
        sc: ScalarType,
        off: u32,
        i: &str,
        memory: Memory,
    ) -> String {
        let mt = mem_type(self.d, sc);
        if matches!(elem, Type::Scalar(_)) {
            return format!("{name}[{i}]");
        }
        let space = self.d.space(matches!(memory, Memory::Shared(_)));
        let byte = self.t(ScalarType::U8);
        format!(
            "*(({space}{mt}*)(({space}{byte}*){name} + (size_t){i} * {}u + {off}u))",
            elem.size()
        )
    }
}
