//! SQL's `GROUP BY` over nullable columns: NULL keys form one group of their own, and the
//! aggregates skip NULL values.

use crate::query::{sum_counted, Build, Inner};
use crate::{Error, Nullable, NullableQuery, NullableRow};
use kiln::ir::Numeric;
use kiln::{GroupBy, Query, Row, Val};
use std::collections::HashMap;
use std::rc::Rc;

/// The rows of a [`NullableQuery`] grouped by a nullable key, from
/// [`NullableQuery::group_by`]. Each aggregate returns one `(key, value)` pair per group: the
/// valid keys in ascending order (as kiln's `group_by` orders them), then the group of NULL
/// keys, if any row has one (`ORDER BY key NULLS LAST`). A group's value is `None` (NULL)
/// when every one of its values is NULL.
pub struct NullableGroupBy<'a, T: NullableRow, K> {
    build: Build<'a, T>,
    key: Rc<dyn Fn(T::Nulls) -> Nullable<K> + 'a>,
}

/// A nullable grouping's result: each group's key (`None` for NULL) and aggregate (`None`
/// where every value was NULL).
pub type Groups<K, R> = Vec<(Option<K>, Option<R>)>;

/// A row of the inner query as closures see it: values, then validity bytes.
type InnerVals<T> = (<T as Row>::Vals, <<T as NullableRow>::Valid as Row>::Vals);

impl<'a, T: NullableRow> NullableQuery<'a, T> {
    /// Groups the rows by `key` (SQL's `GROUP BY`); NULL keys form one group. Nothing runs
    /// until an aggregate of the returned [`NullableGroupBy`].
    ///
    /// ```
    /// use arrow_array::{Float32Array, UInt32Array};
    /// use kiln::prelude::*;
    /// use kiln_arrow::ArrowQueries;
    ///
    /// let ctx = Context::with_backend(BackendKind::Cpu)?;
    /// let shop = UInt32Array::from(vec![Some(2), None, Some(2), Some(1), None]);
    /// let sold = Float32Array::from(vec![Some(1.5), Some(4.0), None, None, None]);
    /// // SELECT shop, SUM(sold) FROM t GROUP BY shop ORDER BY shop NULLS LAST
    /// let sums = ctx.from_arrow(&shop).zip(&sold).group_by(|(s, _)| s).sum(|(_, x)| x)?;
    /// assert_eq!(sums, [(Some(1), None), (Some(2), Some(1.5)), (None, Some(4.0))]);
    /// # Ok::<(), kiln_arrow::Error>(())
    /// ```
    pub fn group_by<K: Numeric + Row>(
        self,
        key: impl Fn(T::Nulls) -> Nullable<K> + 'a,
    ) -> NullableGroupBy<'a, T, K> {
        NullableGroupBy {
            build: self.build,
            key: Rc::new(key),
        }
    }
}

impl<'a, T: NullableRow, K: Numeric + Row> NullableGroupBy<'a, T, K> {
    /// The rows whose key is valid (`true`) or NULL (`false`).
    fn rows(&self, keyed: bool) -> Inner<'a, T> {
        let key = self.key.clone();
        (self.build)().filter(move |(x, v): InnerVals<T>| key(T::join(x, v)).is_valid().eq(keyed))
    }

    /// The rows whose key is valid, grouped by it.
    fn grouped(&self, rows: Inner<'a, T>) -> GroupBy<'a, K, (T, T::Valid)> {
        let key = self.key.clone();
        rows.group_by(move |(x, v): InnerVals<T>| key(T::join(x, v)).value())
    }

    /// SQL's `COUNT(*)` per group: how many rows each key has.
    pub fn count(self) -> Result<Vec<(Option<K>, usize)>, Error> {
        let mut groups: Vec<(Option<K>, usize)> = self
            .grouped(self.rows(true))
            .count()?
            .into_iter()
            .map(|(k, n)| (Some(k), n))
            .collect();
        let nulls = self.rows(false).count()?;
        if nulls > 0 {
            groups.push((None, nulls));
        }
        Ok(groups)
    }

    /// Runs an aggregate over each group's valid values: `grouped` over the rows with a valid
    /// key, `whole` over the values of the NULL key's rows; groups with no valid value get
    /// `None`.
    fn aggregate<V: Numeric + Row<Vals = Val<V>>, R: Copy>(
        self,
        value: impl Fn(T::Nulls) -> Nullable<V> + 'a,
        grouped: impl FnOnce(
            GroupBy<'a, K, (T, T::Valid)>,
            Box<dyn Fn(InnerVals<T>) -> Val<V> + 'a>,
        ) -> kiln::Result<Vec<(K, R)>>,
        whole: impl FnOnce(Query<'a, V>) -> Result<Option<R>, Error>,
    ) -> Result<Groups<K, R>, Error> {
        let value = Rc::new(value);
        let counts = self.grouped(self.rows(true)).count()?;
        let (valued, of_key) = (value.clone(), value.clone());
        let with_values = self
            .rows(true)
            .filter(move |(x, v): InnerVals<T>| valued(T::join(x, v)).is_valid());
        let found: HashMap<Vec<u64>, R> = grouped(
            self.grouped(with_values),
            Box::new(move |(x, v): InnerVals<T>| of_key(T::join(x, v)).value()),
        )?
        .into_iter()
        .map(|(k, r)| (bits(k), r))
        .collect();
        let mut groups: Groups<K, R> = counts
            .into_iter()
            .map(|(k, _)| (Some(k), found.get(&bits(k)).copied()))
            .collect();
        if self.rows(false).count()? > 0 {
            let values = self
                .rows(false)
                .map(move |(x, v): InnerVals<T>| {
                    let n = value(T::join(x, v));
                    (n.value(), n.is_valid())
                })
                .filter(|(_, valid): (Val<V>, Val<bool>)| valid)
                .map(|(x, _): (Val<V>, Val<bool>)| x);
            groups.push((None, whole(values)?));
        }
        Ok(groups)
    }

    /// SQL's `SUM(value)` per group (wrapping for integers, in kiln's order for floats).
    pub fn sum<V: Numeric + Row<Vals = Val<V>>>(
        self,
        value: impl Fn(T::Nulls) -> Nullable<V> + 'a,
    ) -> Result<Groups<K, V>, Error> {
        self.aggregate(
            value,
            |g, v| g.sum(v),
            |q| sum_counted(q.map(|x: Val<V>| (x, kiln::ir::lit(1u32)))),
        )
    }

    /// SQL's `MIN(value)` per group (NaN skipped unless every value is NaN, as kiln's).
    pub fn min<V: Numeric + Row<Vals = Val<V>>>(
        self,
        value: impl Fn(T::Nulls) -> Nullable<V> + 'a,
    ) -> Result<Groups<K, V>, Error> {
        self.aggregate(value, |g, v| g.min(v), |q| Ok(q.min()?))
    }

    /// SQL's `MAX(value)` per group, as [`NullableGroupBy::min`].
    pub fn max<V: Numeric + Row<Vals = Val<V>>>(
        self,
        value: impl Fn(T::Nulls) -> Nullable<V> + 'a,
    ) -> Result<Groups<K, V>, Error> {
        self.aggregate(value, |g, v| g.max(v), |q| Ok(q.max()?))
    }

    /// SQL's `AVG(value)` per group (summed as kiln's `average` sums).
    pub fn average<V: Numeric + Row<Vals = Val<V>>>(
        self,
        value: impl Fn(T::Nulls) -> Nullable<V> + 'a,
    ) -> Result<Groups<K, f64>, Error> {
        self.aggregate(value, |g, v| g.average(v), |q| Ok(q.average()?))
    }

    /// SQL's `COUNT(value)` per group: how many of each group's values are not NULL.
    pub fn count_values<V: Numeric + Row<Vals = Val<V>>>(
        self,
        value: impl Fn(T::Nulls) -> Nullable<V> + 'a,
    ) -> Result<Vec<(Option<K>, usize)>, Error> {
        let sums = self.sum(move |row| {
            let n = value(row);
            Nullable::valid(kiln::select(n.is_valid(), 1u32, 0u32))
        })?;
        Ok(sums
            .into_iter()
            .map(|(k, n)| (k, n.unwrap_or(0) as usize))
            .collect())
    }
}

/// A key's bits, to look it up (floats are not `Hash`).
fn bits<K: Row>(k: K) -> Vec<u64> {
    let mut values = Vec::new();
    k.to_values(&mut values);
    values.iter().map(|v| v.to_bits()).collect()
}
