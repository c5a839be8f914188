//! The one walk over statements every pass and writer shares: nested blocks, pre-order
//! visits, and searches with or without the statements of nested loops.

use crate::{Block, Stmt};

impl Stmt {
    /// The blocks nested directly in the statement: an `if`'s two branches, a loop's body and
    /// its continuing block, a native call's fallback; none for the other statements.
    pub fn nested(&self) -> impl Iterator<Item = &Block> {
        let (a, b) = match self {
            Stmt::If { accept, reject, .. } => (Some(accept), Some(reject)),
            Stmt::Loop { body, continuing } => (Some(body), Some(continuing)),
            Stmt::Native(call) => (Some(&call.fallback), None),
            _ => (None, None),
        };
        a.into_iter().chain(b)
    }

    /// The statement with each block nested directly in it (see [`Stmt::nested`]) replaced
    /// by `f` of that block; a copy of the statement for those without blocks.
    pub fn map_nested(&self, f: &mut impl FnMut(&Block) -> Block) -> Stmt {
        match self {
            Stmt::If {
                cond,
                accept,
                reject,
            } => Stmt::If {
                cond: *cond,
                accept: f(accept),
                reject: f(reject),
            },
            Stmt::Loop { body, continuing } => Stmt::Loop {
                body: f(body),
                continuing: f(continuing),
            },
            Stmt::Native(call) => Stmt::Native(crate::NativeCall {
                fallback: f(&call.fallback),
                ..call.clone()
            }),
            other => other.clone(),
        }
    }

    /// Calls `f` on the statement, then on every statement nested in it, each before the
    /// statements nested in it (an `if`'s accepting branch before its rejecting one, a
    /// loop's body before its continuing block).
    pub fn walk<'a>(&'a self, f: &mut impl FnMut(&'a Stmt)) {
        f(self);
        for b in self.nested() {
            b.walk(f);
        }
    }

    /// Whether the statement or a statement nested in it satisfies `p`.
    pub fn any(&self, p: &impl Fn(&Stmt) -> bool) -> bool {
        p(self) || self.nested().any(|b| b.any(p))
    }

    /// Whether the statement or a statement nested in it, but not inside a loop nested in
    /// it, satisfies `p`: the statements whose `break` or `continue` would leave the loop
    /// this statement is in.
    pub fn any_outside_loops(&self, p: &impl Fn(&Stmt) -> bool) -> bool {
        p(self)
            || match self {
                Stmt::If { accept, reject, .. } => accept
                    .0
                    .iter()
                    .chain(&reject.0)
                    .any(|s| s.any_outside_loops(p)),
                Stmt::Native(call) => call.fallback.0.iter().any(|s| s.any_outside_loops(p)),
                _ => false,
            }
    }
}

/// [`Stmt::walk`] over each of `stmts` in order.
pub fn walk_stmts<'a>(stmts: &'a [Stmt], f: &mut impl FnMut(&'a Stmt)) {
    for s in stmts {
        s.walk(f);
    }
}

impl Block {
    /// [`Stmt::walk`] over each statement of the block in order.
    pub fn walk<'a>(&'a self, f: &mut impl FnMut(&'a Stmt)) {
        walk_stmts(&self.0, f);
    }

    /// Whether a statement of the block, or one nested in it, satisfies `p`.
    pub fn any(&self, p: &impl Fn(&Stmt) -> bool) -> bool {
        self.0.iter().any(|s| s.any(p))
    }

    /// The number of statements in the block, nested ones included, that satisfy `p`.
    pub fn count(&self, p: &impl Fn(&Stmt) -> bool) -> usize {
        let mut n = 0;
        self.walk(&mut |s| n += p(s) as usize);
        n
    }
}

#[cfg(test)]
mod tests {
    use crate::{Block, Handle, Stmt};

    /// `if { break; loop { continue; } } else { return; }` then `loop { break; }`.
    fn sample() -> Block {
        let inner_loop = Stmt::Loop {
            body: Block(vec![Stmt::Continue]),
            continuing: Block(vec![]),
        };
        Block(vec![
            Stmt::If {
                cond: Handle(0),
                accept: Block(vec![Stmt::Break, inner_loop]),
                reject: Block(vec![Stmt::Return(None)]),
            },
            Stmt::Loop {
                body: Block(vec![Stmt::Break]),
                continuing: Block(vec![]),
            },
        ])
    }

    fn name(s: &Stmt) -> &'static str {
        match s {
            Stmt::If { .. } => "if",
            Stmt::Loop { .. } => "loop",
            Stmt::Break => "break",
            Stmt::Continue => "continue",
            Stmt::Return(_) => "return",
            _ => "other",
        }
    }

    #[test]
    fn walk_visits_each_statement_before_the_ones_nested_in_it() {
        let mut seen = Vec::new();
        sample().walk(&mut |s| seen.push(name(s)));
        assert_eq!(
            seen,
            ["if", "break", "loop", "continue", "return", "loop", "break"]
        );
        assert_eq!(sample().count(&|s| matches!(s, Stmt::Loop { .. })), 2);
    }

    #[test]
    fn searches_outside_loops_skip_the_statements_of_nested_loops() {
        let b = sample();
        let is_continue = |s: &Stmt| matches!(s, Stmt::Continue);
        assert!(b.any(&is_continue));
        assert!(!b.0.iter().any(|s| s.any_outside_loops(&is_continue)));
        let is_break = |s: &Stmt| matches!(s, Stmt::Break);
        assert!(b.0[0].any_outside_loops(&is_break));
        assert!(!b.0[1].any_outside_loops(&is_break));
    }
}
