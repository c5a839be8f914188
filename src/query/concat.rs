//! `concat`: the rows of one query followed by those of another. Each column of the result
//! is a chain of pieces, one input column per query joined; the first piece is the column
//! the stages read, and a load of row `i` selects the piece that holds it, so neither side
//! is copied. A side with stages runs first into device columns of its own.

use super::{too_large, Input, Query};
use crate::error::Error;
use kiln_ir::*;
use std::sync::Arc;

/// The number [`constants::user_code`] gives the first row of the chained input column `c`:
/// `CHAIN_CLOSURE - c`, below the numbers of the other closures, so a concat of other lengths
/// reuses its kernels.
const CHAIN_CLOSURE: u32 = u32::MAX - 3;

/// Which rows of the query an input column holds.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Piece {
    /// Every row: row `i` at index `i`.
    Whole,
    /// The rows from `start` on, until the piece in input column `next` starts (to the end
    /// without one); row `i` at index `i - start`. The first piece (`start` 0) is the column
    /// that stages read; it reads the pieces after it.
    Chained { start: usize, next: Option<usize> },
}

impl<'a, T: crate::row::Row> Query<'a, T> {
    /// The rows of this query followed by the rows of `other` (LINQ `Concat`, Rust's
    /// `chain`). Over sources (slices, buffers, earlier concats) the kernels read each side
    /// where it lies: no pass and no copy. A side with stages runs first, when `concat` is
    /// called, into device columns the query holds (as for [`Query::enumerate`] after a
    /// filter); an error of that run is the terminal's. Fails at the terminal with
    /// `Unsupported` when `other` belongs to another context and with `TooLarge` when the
    /// two hold more than [`crate::MAX_LEN`] rows together.
    ///
    /// ```
    /// # use kiln::prelude::*;
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let (a, b) = ([1u32, 2, 3], [10u32, 20, 30, 40]);
    /// let odd_then_big = ctx
    ///     .from(&a)
    ///     .filter(|x| (x % 2).eq(1))
    ///     .concat(ctx.from(&b).map(|x| x * 2))
    ///     .enumerate()
    ///     .to_vec()?;
    /// let rust: Vec<(u32, u32)> = (0..)
    ///     .zip(a.iter().filter(|x| *x % 2 == 1).copied().chain(b.iter().map(|x| x * 2)))
    ///     .collect();
    /// assert_eq!(odd_then_big, rust);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn concat(self, other: Query<'a, T>) -> Query<'a, T> {
        let foreign =
            (!Arc::ptr_eq(self.ctx.backend(), other.ctx.backend())).then(|| Error::Unsupported {
                backend: self.ctx.device().backend,
                what: "concat with a query of another context".into(),
            });
        let mut q = self.kept_rows(|_| true);
        let other = other.kept_rows(|_| true);
        if q.error.is_none() {
            q.error = foreign
                .or(other.error)
                .or_else(|| too_large(q.len + other.len));
        }
        let offset = q.columns.len();
        for head in 0..q.base_columns {
            let last = q.last_piece(head);
            q.columns[last].piece = Piece::Chained {
                start: q.columns[last].start(),
                next: Some(offset + head),
            };
        }
        let shift = q.len;
        q.columns
            .extend(other.columns.into_iter().map(|input| Input {
                piece: match input.piece {
                    Piece::Whole => Piece::Chained {
                        start: shift,
                        next: None,
                    },
                    Piece::Chained { start, next } => Piece::Chained {
                        start: start + shift,
                        next: next.map(|n| n + offset),
                    },
                },
                ..input
            }));
        q.len += other.len;
        q
    }
}

impl<T> Query<'_, T> {
    /// Whether input column `c` is a piece of a chain after its first.
    pub(super) fn is_later_piece(&self, c: usize) -> bool {
        self.columns
            .iter()
            .any(|input| matches!(input.piece, Piece::Chained { next: Some(n), .. } if n == c))
    }

    /// The input column of the last piece of the chain that starts at input column `c`.
    fn last_piece(&self, mut c: usize) -> usize {
        while let Piece::Chained { next: Some(n), .. } = self.columns[c].piece {
            c = n;
        }
        c
    }

    /// Row `i` of input column `c`, read from the later pieces of its chain where it has
    /// them and `i` lies past its own rows.
    pub(super) fn load_chained(&self, cols: &[Memory], c: usize, i: Val<u32>) -> AnyVal {
        self.load_pieces(cols, c, i, i)
    }

    /// Row `i` of the chain of pieces from input column `c` on, which holds it at `own`.
    fn load_pieces(&self, cols: &[Memory], c: usize, i: Val<u32>, own: Val<u32>) -> AnyVal {
        let here = self.load_layout(cols, c, own);
        match self.columns[c].piece {
            Piece::Chained { next: Some(n), .. } => {
                let start = self.piece_start(n);
                let later = self.load_pieces(cols, n, i, i - start);
                super::select_dyn(&i.lt(start).erase(), &here, &later)
            }
            _ => here,
        }
    }

    /// The first row of the piece in input column `c`: user code's constant, so another
    /// split compiles nothing new.
    fn piece_start(&self, c: usize) -> Val<u32> {
        let start = self.columns[c].start() as u32;
        constants::user_code(CHAIN_CLOSURE - c as u32, || lit(start))
    }
}

impl Input<'_> {
    /// The first row this column holds.
    fn start(&self) -> usize {
        match self.piece {
            Piece::Whole => 0,
            Piece::Chained { start, .. } => start,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prelude::*;

    #[test]
    fn pieces_link_in_order_and_start_where_the_rows_before_them_end() {
        let ctx = Context::with_backend(BackendKind::Cpu).unwrap();
        let (a, b, c) = ([1u32, 2], [3u32, 4, 5], [6u32]);
        let q = ctx.from(&a).concat(ctx.from(&b)).concat(ctx.from(&c));
        let pieces: Vec<Piece> = q.columns.iter().map(|i| i.piece).collect();
        let chained = |start, next| Piece::Chained { start, next };
        assert_eq!(
            pieces,
            [chained(0, Some(1)), chained(2, Some(2)), chained(5, None)]
        );
        assert_eq!(q.len, 6);
    }
}
