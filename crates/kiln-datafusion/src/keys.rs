//! Group keys on the host: each key column's distinct values get dense codes (in order of
//! first appearance, NULL one value like the others, as SQL's `GROUP BY` has it), and the
//! codes of several columns combine into one code per row. kiln's
//! dense grouping folds at most [`WINDOW`] codes at once, so a batch with more groups is
//! split into windows of codes, each folded apart.

use datafusion::arrow::array::{Array, ArrayRef, AsArray, UInt32Array};
use datafusion::arrow::compute::take;
use datafusion::arrow::datatypes::{self as adt, ArrowPrimitiveType, DataType};
use datafusion::common::ScalarValue as Sv;
use kiln::ir::ScalarType;
use kiln::Column;
use std::collections::HashMap;
use std::hash::Hash;

/// The most codes one dense grouping folds (kiln's dense plan).
pub(crate) const WINDOW: usize = 1024;

/// One code per row, as narrow as the number of codes allows.
pub(crate) enum Codes {
    U8(Vec<u8>),
    U16(Vec<u16>),
}

impl Codes {
    /// Codes below [`WINDOW`], narrowed.
    fn narrow(codes: impl ExactSizeIterator<Item = u32>, count: usize) -> Codes {
        match count <= 256 {
            true => Codes::U8(codes.map(|c| c as u8).collect()),
            false => Codes::U16(codes.map(|c| c as u16).collect()),
        }
    }

    /// How many rows it codes.
    pub(crate) fn len(&self) -> usize {
        match self {
            Codes::U8(v) => v.len(),
            Codes::U16(v) => v.len(),
        }
    }

    pub(crate) fn column(&self) -> Column<'_> {
        match self {
            Codes::U8(v) => Column::of(v),
            Codes::U16(v) => Column::of(v),
        }
    }

    pub(crate) fn ty(&self) -> ScalarType {
        match self {
            Codes::U8(_) => ScalarType::U8,
            Codes::U16(_) => ScalarType::U16,
        }
    }
}

/// The values seen so far and their codes: a short list while there are few (most
/// groupings have a handful of keys, and a scan of a few beats hashing), a hash map past
/// [`Seen::SHORT`].
struct Seen<V> {
    short: Vec<(V, u32)>,
    map: HashMap<V, u32>,
}

impl<V: Hash + Eq + Copy> Seen<V> {
    const SHORT: usize = 8;

    fn new() -> Seen<V> {
        Seen {
            short: Vec::new(),
            map: HashMap::new(),
        }
    }

    /// `value`'s code, `next` when it is new.
    fn code(&mut self, value: V, next: u32) -> u32 {
        if self.map.is_empty() {
            if let Some((_, c)) = self.short.iter().find(|(v, _)| *v == value) {
                return *c;
            }
            if self.short.len() < Self::SHORT {
                self.short.push((value, next));
                return next;
            }
            self.map.extend(self.short.drain(..));
        }
        *self.map.entry(value).or_insert(next)
    }
}

/// Dense codes for values in order of first appearance, remembering the row of each first.
struct Coder {
    codes: Vec<u32>,
    firsts: Vec<usize>,
}

impl Coder {
    /// Codes the next row: `code_of` returns its value's code, or the code it is given (the
    /// next unused one) when the value is new.
    fn push(&mut self, code_of: impl FnOnce(u32) -> u32) {
        let next = self.firsts.len() as u32;
        let code = code_of(next);
        if code == next {
            self.firsts.push(self.codes.len());
        }
        self.codes.push(code);
    }

    fn code<V: Hash + Eq + Copy>(&mut self, seen: &mut Seen<V>, value: V) {
        self.push(|next| seen.code(value, next));
    }

    /// Codes the next row, a NULL: `null` is the code NULL has, once it has one.
    fn code_null(&mut self, null: &mut Option<u32>) {
        self.push(|next| *null.get_or_insert(next));
    }
}

/// The codes of a primitive column's values (the values under NULLs are not read).
fn code_primitive<T: ArrowPrimitiveType>(a: &ArrayRef, coder: &mut Coder)
where
    T::Native: Hash + Eq,
{
    let (mut seen, mut null) = (Seen::new(), None);
    let values = a.as_primitive::<T>().values();
    match a.nulls() {
        None => values.iter().for_each(|v| coder.code(&mut seen, *v)),
        Some(valid) => {
            for (v, valid) in values.iter().zip(valid) {
                match valid {
                    true => coder.code(&mut seen, *v),
                    false => coder.code_null(&mut null),
                }
            }
        }
    }
}

/// A column's codes and the value of each code.
fn encode_column(a: &ArrayRef) -> Result<(Vec<u32>, Vec<Sv>), String> {
    let mut coder = Coder {
        codes: Vec::with_capacity(a.len()),
        firsts: Vec::new(),
    };
    match a.data_type() {
        DataType::Utf8View => {
            // Strings of up to 12 bytes are their whole 16-byte view: equal views, equal strings.
            let s = a.as_string_view();
            let (mut short, mut long, mut null) = (Seen::new(), Seen::new(), None);
            for (row, view) in s.views().iter().enumerate() {
                match (s.is_valid(row), (*view as u32) <= 12) {
                    (false, _) => coder.code_null(&mut null),
                    (true, true) => coder.code(&mut short, *view),
                    (true, false) => coder.code(&mut long, s.value(row)),
                }
            }
        }
        DataType::Int8 => code_primitive::<adt::Int8Type>(a, &mut coder),
        DataType::Int16 => code_primitive::<adt::Int16Type>(a, &mut coder),
        DataType::Int32 => code_primitive::<adt::Int32Type>(a, &mut coder),
        DataType::Int64 => code_primitive::<adt::Int64Type>(a, &mut coder),
        DataType::UInt8 => code_primitive::<adt::UInt8Type>(a, &mut coder),
        DataType::UInt16 => code_primitive::<adt::UInt16Type>(a, &mut coder),
        DataType::UInt32 => code_primitive::<adt::UInt32Type>(a, &mut coder),
        DataType::UInt64 => code_primitive::<adt::UInt64Type>(a, &mut coder),
        DataType::Date32 => code_primitive::<adt::Date32Type>(a, &mut coder),
        DataType::Decimal128(..) => code_primitive::<adt::Decimal128Type>(a, &mut coder),
        _ => {
            // Other types by their `ScalarValue`s (NULL a value of them), hashed (not `Copy`,
            // so not through `Seen`).
            let mut seen: HashMap<Sv, u32> = HashMap::new();
            for row in 0..a.len() {
                let v = Sv::try_from_array(a, row).map_err(|e| e.to_string())?;
                coder.push(|next| *seen.entry(v).or_insert(next));
            }
        }
    }
    let values = coder
        .firsts
        .iter()
        .map(|&row| Sv::try_from_array(a, row).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    Ok((coder.codes, values))
}

/// Each row's group code over the key columns `keys` (of `rows` rows each), and each code's
/// key values (NULL where the key is).
pub(crate) fn encode_keys(
    keys: &[ArrayRef],
    rows: usize,
) -> Result<(Vec<u32>, Vec<Vec<Sv>>), String> {
    if let Some(k) = keys.iter().find(|k| k.len() != rows) {
        return Err(format!("a group key of {} values for {rows} rows", k.len()));
    }
    let mut columns = keys.iter().map(encode_column);
    let Some(first) = columns.next() else {
        return Ok((vec![0; rows], vec![Vec::new()]));
    };
    let (mut combined, values) = first?;
    let mut decode: Vec<Vec<Sv>> = values.into_iter().map(|v| vec![v]).collect();
    for column in columns {
        let (codes, values) = column?;
        let width = values.len();
        // Renumbers the combinations seen so far with this column's codes, in order of
        // first appearance: through a table of every pair while it is small, else hashed.
        let pairs = decode.len() * width;
        let mut table = match pairs <= 1 << 20 {
            true => Pairs::Table(vec![u32::MAX; pairs]),
            false => Pairs::Hashed(HashMap::new()),
        };
        let mut next: Vec<Vec<Sv>> = Vec::new();
        for (c, code) in combined.iter_mut().zip(&codes) {
            let pair = *c as usize * width + *code as usize;
            *c = table.code(pair, || {
                let mut key = decode[pair / width].clone();
                key.push(values[pair % width].clone());
                next.push(key);
                (next.len() - 1) as u32
            });
        }
        decode = next;
    }
    Ok((combined, decode))
}

/// The codes of pairs of codes seen so far.
enum Pairs {
    Table(Vec<u32>),
    Hashed(HashMap<usize, u32>),
}

impl Pairs {
    /// `pair`'s code, from `new` when it has none yet.
    fn code(&mut self, pair: usize, new: impl FnOnce() -> u32) -> u32 {
        match self {
            Pairs::Table(t) => {
                if t[pair] == u32::MAX {
                    t[pair] = new();
                }
                t[pair]
            }
            Pairs::Hashed(m) => *m.entry(pair).or_insert_with(new),
        }
    }
}

/// The rows of one window of codes: the columns (a batch's own, or its rows of the window
/// gathered), each row's code less `base`, and `base`.
pub(crate) struct Window {
    pub(crate) arrays: Vec<ArrayRef>,
    pub(crate) codes: Codes,
    pub(crate) base: usize,
}

/// Splits the rows of `arrays`, whose codes are `codes` (of `count` distinct values), into
/// windows of at most [`WINDOW`] codes. With at most that many codes, the one window is the
/// columns themselves; otherwise the rows are gathered window by window (a counting sort).
pub(crate) fn windows(
    arrays: &[ArrayRef],
    codes: &[u32],
    count: usize,
) -> Result<Vec<Window>, String> {
    if count <= WINDOW {
        return Ok(vec![Window {
            arrays: arrays.to_vec(),
            codes: Codes::narrow(codes.iter().copied(), count),
            base: 0,
        }]);
    }
    let windows = count.div_ceil(WINDOW);
    let mut starts = vec![0u32; windows + 1];
    for c in codes {
        starts[*c as usize / WINDOW + 1] += 1;
    }
    for w in 0..windows {
        starts[w + 1] += starts[w];
    }
    let mut next = starts.clone();
    let mut order = vec![0u32; codes.len()];
    for (row, c) in codes.iter().enumerate() {
        let w = *c as usize / WINDOW;
        order[next[w] as usize] = row as u32;
        next[w] += 1;
    }
    let order = UInt32Array::from(order);
    let gathered = arrays
        .iter()
        .map(|a| take(a, &order, None).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((0..windows)
        .map(|w| {
            let (start, end) = (starts[w] as usize, starts[w + 1] as usize);
            let local = order.values()[start..end]
                .iter()
                .map(|&row| codes[row as usize] - (w * WINDOW) as u32);
            Window {
                arrays: gathered
                    .iter()
                    .map(|a| a.slice(start, end - start))
                    .collect(),
                codes: Codes::U16(local.map(|c| c as u16).collect()),
                base: w * WINDOW,
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, RecordBatch, StringViewArray};
    use std::sync::Arc;

    /// A batch of `n` rows keyed by (i64, string) with about `groups` combinations.
    fn batch(n: usize, groups: u64) -> RecordBatch {
        let ints: Int64Array = (0..n as u64)
            .map(|i| ((i * 7919) % groups) as i64)
            .collect();
        let strings: StringViewArray = (0..n)
            .map(|i| Some(["short", "a string longer than twelve bytes"][i % 2]))
            .collect();
        RecordBatch::try_from_iter([
            ("k", Arc::new(ints) as ArrayRef),
            ("s", Arc::new(strings) as ArrayRef),
        ])
        .unwrap()
    }

    #[test]
    fn codes_name_each_rows_key_values() {
        let b = batch(5000, 3000);
        let (codes, decode) = encode_keys(b.columns(), b.num_rows()).unwrap();
        let mut want = std::collections::HashSet::new();
        for (row, code) in codes.iter().enumerate() {
            let key = &decode[*code as usize];
            assert_eq!(key[0], Sv::try_from_array(b.column(0), row).unwrap());
            assert_eq!(key[1], Sv::try_from_array(b.column(1), row).unwrap());
            want.insert((key[0].clone(), key[1].clone()));
        }
        assert_eq!(decode.len(), want.len());
    }

    #[test]
    fn null_is_one_key_apart_from_the_value_under_it() {
        // Arrow stores 0 and "" under these NULLs: they must not join the rows of 0 and "".
        let ints: ArrayRef = Arc::new(Int64Array::from(vec![Some(0), None, Some(0), None, None]));
        let strings: ArrayRef = Arc::new(StringViewArray::from(vec![
            Some(""),
            None,
            Some("a string longer than twelve bytes"),
            None,
            Some(""),
        ]));
        let (codes, decode) = encode_keys(std::slice::from_ref(&ints), 5).unwrap();
        assert_eq!(codes, [0, 1, 0, 1, 1]);
        assert_eq!(decode, [vec![Sv::Int64(Some(0))], vec![Sv::Int64(None)]]);
        let (codes, decode) = encode_keys(std::slice::from_ref(&strings), 5).unwrap();
        assert_eq!(codes, [0, 1, 2, 1, 0]);
        assert!(decode[1][0].is_null() && !decode[0][0].is_null());
        let (codes, decode) = encode_keys(&[ints, strings], 5).unwrap();
        assert_eq!(codes, [0, 1, 2, 1, 3]);
        assert!(decode[3][0].is_null() && decode[3][1] == Sv::Utf8View(Some(String::new())));
    }

    #[test]
    fn windows_hold_every_row_once_with_codes_below_a_window() {
        let b = batch(9000, 3000);
        let (codes, decode) = encode_keys(&b.columns()[..1], b.num_rows()).unwrap();
        let ws = windows(b.columns(), &codes, decode.len()).unwrap();
        assert_eq!(ws.len(), decode.len().div_ceil(WINDOW));
        let mut rows = 0;
        for w in &ws {
            let Codes::U16(local) = &w.codes else {
                panic!("a window of gathered rows has 16-bit codes")
            };
            for (i, c) in local.iter().enumerate() {
                assert!((*c as usize) < WINDOW);
                let key = Sv::try_from_array(&w.arrays[0], i).unwrap();
                assert_eq!(decode[w.base + *c as usize][0], key);
            }
            rows += local.len();
        }
        assert_eq!(rows, 9000);
    }
}
