//! Loads and stores: buffers and shared arrays as WGSL arrays, 8/16-bit and `bool` elements
//! packed in 32-bit words, bounds checks.

use crate::*;

impl Writer {
    /// Statements storing component values `vals` into element `i` of memory `m`.
    pub(crate) fn store(&mut self, m: Memory, i: &str, vals: &[String]) -> W<String> {
        let info = self.mem(m)?;
        let name = info.name.clone();
        let elem = info.elem.clone();
        let storage = info.storage;
        let flat = elem.flatten();
        Ok(match storage {
            Storage::Typed(_) => format!("{name}[{i}] = {};", vals[0]),
            Storage::Atomic(ScalarType::F32) => {
                format!("atomicStore(&{name}[{i}], bitcast<u32>({}));", vals[0])
            }
            Storage::Atomic(_) => format!("atomicStore(&{name}[{i}], {});", vals[0]),
            Storage::Shared => {
                let mut parts = Vec::new();
                for (c, ((s, _), v)) in flat.iter().zip(vals).enumerate() {
                    let v = if *s == ScalarType::Bool {
                        format!("select(0u, 1u, {v})")
                    } else {
                        v.clone()
                    };
                    parts.push(format!(
                        "{}[{i}] = {v};",
                        component_name(&name, c, flat.len())
                    ));
                }
                parts.join(" ")
            }
            Storage::Words { atomic } => {
                let mut parts = vec![format!("let kiln_b = {i} * {}u;", elem.size())];
                for ((s, off), v) in flat.iter().zip(vals) {
                    let bits = match s {
                        ScalarType::Bool => format!("select(0u, 1u, {v})"),
                        ScalarType::U8 | ScalarType::U16 | ScalarType::U32 => v.clone(),
                        ScalarType::F16 => self.f2h(v),
                        _ if s.bits() == 64 => format!("bitcast<u64>({v})"),
                        _ => format!("bitcast<u32>({v})"),
                    };
                    let w = format!("{name}[(kiln_b + {off}u) >> 2u]");
                    match s.size() {
                        4 if atomic => parts.push(format!("atomicStore(&{w}, {bits});")),
                        4 => parts.push(format!("{w} = {bits};")),
                        8 => {
                            let hi = format!("{name}[((kiln_b + {off}u) >> 2u) + 1u]");
                            let lo_v = format!("u32({bits} & 0xfffffffflu)");
                            let hi_v = format!("u32({bits} >> 32u)");
                            if atomic {
                                parts.push(format!(
                                    "atomicStore(&{w}, {lo_v}); atomicStore(&{hi}, {hi_v});"
                                ));
                            } else {
                                parts.push(format!("{w} = {lo_v}; {hi} = {hi_v};"));
                            }
                        }
                        size => {
                            let mask = if size == 1 { "0xffu" } else { "0xffffu" };
                            let sh = format!("(((kiln_b + {off}u) & 3u) * 8u)");
                            let keep = format!("~({mask} << {sh})");
                            let put = format!("(({bits} & {mask}) << {sh})");
                            if atomic {
                                parts.push(format!(
                                    "atomicAnd(&{w}, {keep}); atomicOr(&{w}, {put});"
                                ));
                            } else {
                                parts.push(format!("{w} = ({w} & {keep}) | {put};"));
                            }
                        }
                    }
                }
                // A block of its own: stores to several such memories in one scope each
                // declare their `kiln_b`.
                format!("{{ {} }}", parts.join(" "))
            }
        })
    }

    /// Component values of element `i` of memory `m`, with the lines that must run first.
    /// When `checked`, an `i` out of bounds reads zero; otherwise a guard proved it in bounds.
    pub(crate) fn load(&mut self, m: Memory, i: &str, h: Handle, checked: bool) -> W<Written> {
        let info = self.mem(m)?;
        let (name, elem, storage, len) = (
            info.name.clone(),
            info.elem.clone(),
            info.storage,
            info.len.clone(),
        );
        let flat = elem.flatten();
        let guard = |s: ScalarType, v: String| match (checked, s) {
            (false, _) => v,
            (true, ScalarType::Bool) => format!("({i} < {len} && {v})"),
            (true, _) => format!("select({}, {v}, {i} < {len})", zero(s)),
        };
        let mut pre = Vec::new();
        let comps = match storage {
            Storage::Typed(s) => vec![guard(s, format!("{name}[{i}]"))],
            Storage::Atomic(ScalarType::F32) => vec![guard(
                ScalarType::F32,
                format!("bitcast<f32>(atomicLoad(&{name}[{i}]))"),
            )],
            Storage::Atomic(s) => vec![guard(s, format!("atomicLoad(&{name}[{i}])"))],
            Storage::Shared => flat
                .iter()
                .enumerate()
                .map(|(c, (s, _))| {
                    let r = format!("{}[{i}]", component_name(&name, c, flat.len()));
                    if *s == ScalarType::Bool {
                        guard(*s, format!("({r} != 0u)"))
                    } else {
                        guard(*s, r)
                    }
                })
                .collect(),
            Storage::Words { atomic } => {
                let b = format!("t{}_b", h.0);
                pre.push(format!("let {b} = {i} * {}u;", elem.size()));
                let word = |at: String| {
                    if atomic {
                        format!("atomicLoad(&{name}[{at}])")
                    } else {
                        format!("{name}[{at}]")
                    }
                };
                flat.iter()
                    .map(|(s, off)| {
                        let w = word(format!("({b} + {off}u) >> 2u"));
                        let v = match s.size() {
                            4 => match s {
                                ScalarType::U32 => w,
                                _ => format!("bitcast<{}>({w})", rt(*s)),
                            },
                            8 => {
                                let hi = word(format!("(({b} + {off}u) >> 2u) + 1u"));
                                let bits = format!("(u64({w}) | (u64({hi}) << 32u))");
                                match s {
                                    ScalarType::U64 => bits,
                                    _ => format!("bitcast<{}>({bits})", rt(*s)),
                                }
                            }
                            size => {
                                let mask = if size == 1 { "0xffu" } else { "0xffffu" };
                                let raw =
                                    format!("(({w} >> ((({b} + {off}u) & 3u) * 8u)) & {mask})");
                                match s {
                                    ScalarType::Bool => format!("({raw} != 0u)"),
                                    ScalarType::I8 | ScalarType::I16 => {
                                        wrap(*s, format!("bitcast<i32>({raw})"))
                                    }
                                    ScalarType::F16 => self.h2f(&raw),
                                    _ => raw,
                                }
                            }
                        };
                        guard(*s, v)
                    })
                    .collect()
            }
        };
        Ok(Written {
            pre,
            comps,
            call: None,
        })
    }
}
