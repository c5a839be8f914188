//! Group keys on the host: each key column's distinct values get dense codes (in order of
//! first appearance), and the codes of several columns combine into one small integer per
//! row, which kiln's dense grouping folds by.

use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::ScalarValue as Sv;
use kiln::ir::ScalarType;
use kiln::Column;
use std::collections::HashMap;

/// The most distinct key combinations one batch may hold (kiln's dense grouping).
pub(crate) const MAX_GROUPS: usize = 1024;

/// One code per row, as narrow as the number of groups allows.
pub(crate) enum Codes {
    U8(Vec<u8>),
    U16(Vec<u16>),
}

impl Codes {
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

/// A column's codes and the value of each code.
fn encode_column(a: &ArrayRef) -> Result<(Vec<u32>, Vec<Sv>), String> {
    let mut codes = Vec::with_capacity(a.len());
    let mut firsts: Vec<usize> = Vec::new();
    if let DataType::Utf8View = a.data_type() {
        // Strings of up to 12 bytes are their whole 16-byte view: equal views, equal strings.
        let s = a.as_string_view();
        let mut short: Vec<(u128, u32)> = Vec::new();
        let mut long: HashMap<&str, u32> = HashMap::new();
        for (row, view) in s.views().iter().enumerate() {
            let code = if (*view as u32) <= 12 {
                match short.iter().find(|(v, _)| v == view) {
                    Some((_, c)) => *c,
                    None => {
                        firsts.push(row);
                        let c = (firsts.len() - 1) as u32;
                        short.push((*view, c));
                        c
                    }
                }
            } else {
                let value = s.value(row);
                *long.entry(value).or_insert_with(|| {
                    firsts.push(row);
                    (firsts.len() - 1) as u32
                })
            };
            codes.push(code);
            if firsts.len() > MAX_GROUPS {
                return Err(format!("more than {MAX_GROUPS} group keys in one batch"));
            }
        }
    } else {
        let mut seen: HashMap<Sv, u32> = HashMap::new();
        for row in 0..a.len() {
            let v = Sv::try_from_array(a, row).map_err(|e| e.to_string())?;
            let code = *seen.entry(v).or_insert_with(|| {
                firsts.push(row);
                (firsts.len() - 1) as u32
            });
            codes.push(code);
            if firsts.len() > MAX_GROUPS {
                return Err(format!("more than {MAX_GROUPS} group keys in one batch"));
            }
        }
    }
    let values = firsts
        .iter()
        .map(|&row| Sv::try_from_array(a, row).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    Ok((codes, values))
}

/// Each row's group code over the key columns `keys` of `batch`, and each code's key
/// values. Fails when the batch holds more than [`MAX_GROUPS`] combinations.
pub(crate) fn encode_keys(
    batch: &RecordBatch,
    keys: &[usize],
) -> Result<(Codes, Vec<Vec<Sv>>), String> {
    let n = batch.num_rows();
    let mut combined = vec![0u32; n];
    let mut decode: Vec<Vec<Sv>> = vec![Vec::new()];
    for &k in keys {
        let (codes, values) = encode_column(batch.column(k))?;
        let width = values.len() as u32;
        // Renumbers the combinations seen so far with this column's codes, in order of
        // first appearance (at most MAX_GROUPS squared pairs).
        let mut seen = vec![u32::MAX; decode.len() * width as usize];
        let mut next: Vec<Vec<Sv>> = Vec::new();
        for (c, code) in combined.iter_mut().zip(&codes) {
            let pair = (*c * width + code) as usize;
            if seen[pair] == u32::MAX {
                let mut key = decode[pair / width as usize].clone();
                key.push(values[pair % width as usize].clone());
                next.push(key);
                seen[pair] = (next.len() - 1) as u32;
            }
            *c = seen[pair];
        }
        if next.len() > MAX_GROUPS {
            return Err(format!("more than {MAX_GROUPS} groups in one batch"));
        }
        decode = next;
    }
    let codes = match decode.len() <= 256 {
        true => Codes::U8(combined.iter().map(|&c| c as u8).collect()),
        false => Codes::U16(combined.iter().map(|&c| c as u16).collect()),
    };
    Ok((codes, decode))
}
