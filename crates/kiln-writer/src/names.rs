//! Names in generated source: user names made safe in a target language, and the names of
//! flattened components and temporaries.

use kiln_ir::{Handle, Kernel, Type};

/// What a target language (and its writer) keeps for itself: the names a user name must not
/// become. [`Namer::safe`] turns any user name into one outside this set, the same way for
/// every language.
pub struct Namer {
    /// Keywords, type names, builtin functions and the other names the language defines.
    pub reserved: &'static [&'static str],
    /// Prefixes the language or the writer keep (`kiln_`, `__`, `atomic`, ...).
    pub prefixes: &'static [&'static str],
    /// Suffixes the writer gives its companion names (`x` has a length `x_len`, ...).
    pub suffixes: &'static [&'static str],
    /// Any further test a language adds (C's macro names in capitals, vector type names).
    pub also: fn(&str) -> bool,
}

impl Namer {
    /// `name`, or `name_` when the name is the language's or could collide with a name the
    /// writer makes: reserved names, reserved prefixes, companion suffixes, names shaped like
    /// temporaries (`t12`, `t3_0`) and names already ending in `_`. The last rule makes the
    /// renaming injective: an escaped name always ends in `_`, a kept one never does, so two
    /// user names never become one (`float` becomes `float_`, a name `float_` becomes
    /// `float__`).
    pub fn safe(&self, name: &str) -> String {
        let temp_like =
            name.starts_with('t') && name[1..].chars().all(|c| c.is_ascii_digit() || c == '_');
        let escaped = self.reserved.contains(&name)
            || self.prefixes.iter().any(|p| name.starts_with(p))
            || self.suffixes.iter().any(|s| name.ends_with(s))
            || temp_like
            || name.ends_with('_')
            || (self.also)(name);
        if escaped {
            format!("{name}_")
        } else {
            name.to_string()
        }
    }

    /// A copy of `kernel` with every user-chosen name (kernel, parameters, shared arrays,
    /// locals, device functions and their parameters and locals) made safe, and kept apart
    /// from `taken`: the names the target's native code uses ([`Kernel::native_names`]),
    /// which never end in `_` (the validator sees to it), so `name_` cannot be one of them.
    pub fn rename(&self, kernel: &Kernel, taken: &[&str]) -> Kernel {
        let safe = |name: &str| match taken.contains(&name) {
            true => format!("{name}_"),
            false => self.safe(name),
        };
        let mut k = kernel.clone();
        k.name = safe(&k.name);
        for p in &mut k.params {
            p.name = safe(&p.name);
        }
        for sh in &mut k.shared {
            sh.name = safe(&sh.name);
        }
        for l in &mut k.body.locals {
            l.name = safe(&l.name);
        }
        for f in &mut k.functions {
            f.name = safe(&f.name);
            for p in &mut f.params {
                p.name = safe(&p.name);
            }
            for l in &mut f.body.locals {
                l.name = safe(&l.name);
            }
        }
        k
    }
}

/// The name of component `c` of a value named `base` that flattens into `components`
/// scalars: `base` itself when there is one, `base_c` otherwise.
pub fn component_name(base: &str, c: usize, components: usize) -> String {
    if components == 1 {
        base.to_string()
    } else {
        format!("{base}_{c}")
    }
}

/// The name of component `c` of the temporary holding expression `h` of type `ty` (`t12`,
/// `t12_0`, ...).
pub fn temp_name(h: Handle, c: usize, ty: &Type) -> String {
    component_name(&format!("t{}", h.0), c, ty.flatten().len())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAMER: Namer = Namer {
        reserved: &["float", "int", "var"],
        prefixes: &["kiln_", "__"],
        suffixes: &["_len"],
        also: |n| n == "M_PI",
    };

    #[test]
    fn reserved_and_shaped_names_get_a_trailing_underscore() {
        for (name, want) in [
            ("float", "float_"),
            ("float_", "float__"),
            ("x", "x"),
            ("kiln_const0", "kiln_const0_"),
            ("__x", "__x_"),
            ("x_len", "x_len_"),
            ("t12", "t12_"),
            ("t3_0", "t3_0_"),
            ("total", "total"),
            ("M_PI", "M_PI_"),
        ] {
            assert_eq!(NAMER.safe(name), want, "{name}");
        }
    }

    /// Every name up to three characters from a small alphabet that covers each rule: no two
    /// become one, and none becomes a name the rules would escape again except by its
    /// trailing `_` (so it cannot be reserved, prefixed or a companion).
    #[test]
    fn renaming_is_injective_and_lands_outside_the_reserved_names() {
        let alphabet = ['t', '1', '_', 'f', 'k', 'x'];
        let mut names = vec![String::new()];
        for _ in 0..4 {
            let longer: Vec<String> = names
                .iter()
                .flat_map(|n| alphabet.iter().map(move |c| format!("{n}{c}")))
                .collect();
            names.extend(longer);
        }
        names.retain(|n| n.chars().next().is_some_and(|c| c.is_ascii_alphabetic()));
        names.extend(
            ["float", "float_", "int", "var_", "kiln_", "x_len", "x_len_"].map(String::from),
        );
        names.sort();
        names.dedup();
        let mut seen = std::collections::HashMap::new();
        for n in &names {
            let safe = NAMER.safe(n);
            assert!(!NAMER.reserved.contains(&safe.as_str()), "{n} -> {safe}");
            if let Some(other) = seen.insert(safe.clone(), n.clone()) {
                panic!("{other} and {n} both become {safe}");
            }
        }
    }
}
