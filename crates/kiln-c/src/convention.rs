//! The calling convention: the C parameter list a kernel is written with, and what each
//! parameter takes at launch, as data the runtimes bind by.

use crate::*;

/// What one parameter of a written kernel takes, in the order of the C parameter list.
/// [`Source::slots`] lists them; a runtime sets argument `i` from slot `i`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// The device address of buffer parameter `param`'s memory.
    Pointer {
        /// The kernel parameter's index.
        param: usize,
    },
    /// Buffer parameter `param`'s element count, as a 32-bit unsigned integer.
    Length {
        /// The kernel parameter's index.
        param: usize,
    },
    /// One flattened component of value parameter `param`: its `size` bytes (1, 2, 4 or 8)
    /// from byte `offset` of the value, passed as an integer of that size.
    Component {
        /// The kernel parameter's index.
        param: usize,
        /// The component's byte offset in the value.
        offset: u32,
        /// The component's size in bytes.
        size: u32,
    },
    /// Dynamic shared array `shared`'s element count, as a 32-bit unsigned integer.
    SharedLength {
        /// The shared array's index in the kernel.
        shared: usize,
    },
    /// Dynamic shared array `shared`'s memory, which the launch sizes (OpenCL's `__local`
    /// argument; CUDA places dynamic arrays in its one extern array instead).
    SharedMemory {
        /// The shared array's index in the kernel.
        shared: usize,
    },
}

impl Writer {
    /// The kernel's C parameters and the slot each takes: a pointer and a `uint` length per
    /// buffer, one scalar per flattened component of a value (under its own name when it has
    /// one component), and per dynamic shared array its length (and on OpenCL its memory).
    pub(crate) fn parameters(&mut self, k: &Kernel) -> Vec<(String, Slot)> {
        let mut params = Vec::new();
        let uint = self.t(ScalarType::U32);
        for (param, p) in k.params.iter().enumerate() {
            match &p.kind {
                ParamKind::Buffer { elem, access } => {
                    let ty = match elem {
                        Type::Scalar(s) => mem_type(self.d, *s),
                        _ => self.t(ScalarType::U8),
                    };
                    let c = if *access == Access::Read {
                        "const "
                    } else {
                        ""
                    };
                    let space = self.d.space(false);
                    params.push((
                        format!("{space}{c}{ty}* {}", p.name),
                        Slot::Pointer { param },
                    ));
                    params.push((format!("{uint} {}_len", p.name), Slot::Length { param }));
                }
                ParamKind::Value(t) => {
                    let flat = t.flatten();
                    for (i, &(s, offset)) in flat.iter().enumerate() {
                        let name = component_name(&p.name, i, flat.len());
                        let size = s.size();
                        let slot = Slot::Component {
                            param,
                            offset,
                            size,
                        };
                        params.push((format!("{} {name}", mem_type(self.d, s)), slot));
                    }
                }
            }
        }
        for (shared, s) in k.shared.iter().enumerate() {
            if s.len == SharedLen::Dynamic {
                params.push((
                    format!("{uint} {}_len", s.name),
                    Slot::SharedLength { shared },
                ));
                if let Some(memory) = self.d.dynamic_shared_memory(&s.name) {
                    params.push((memory, Slot::SharedMemory { shared }));
                }
            }
        }
        params
    }
}

/// One scalar argument, in the width the signature gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScalarArg {
    /// A 1-byte scalar.
    B1(u8),
    /// A 2-byte scalar.
    B2(u16),
    /// A 4-byte scalar (and every length).
    B4(u32),
    /// An 8-byte scalar (and a CUDA device address).
    B8(u64),
}

impl ScalarArg {
    /// The [`Slot::Component`] at `offset` of `size` bytes (1, 2, 4 or 8) of a value's
    /// little-endian bytes; `None` when the value is too short or the size is none of those.
    pub fn component(value: &[u8], offset: u32, size: u32) -> Option<ScalarArg> {
        let b = value.get(offset as usize..offset as usize + size as usize)?;
        Some(match *b {
            [x] => ScalarArg::B1(x),
            [a, b] => ScalarArg::B2(u16::from_le_bytes([a, b])),
            [a, b, c, d] => ScalarArg::B4(u32::from_le_bytes([a, b, c, d])),
            _ => ScalarArg::B8(u64::from_le_bytes(b.try_into().ok()?)),
        })
    }
}
