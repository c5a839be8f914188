//! Parquet files of a table, for the tests and the benchmark that read TPC-H from Parquet.

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::error::{DataFusionError, Result};
use datafusion::parquet::arrow::ArrowWriter;
use datafusion::prelude::SessionContext;
use std::error::Error;
use std::path::Path;

/// Writes `batches` (of `schema`) as `parts` Parquet files, `part-0.parquet` and on, of
/// consecutive batches into the folder `dir`, made anew (uncompressed, the writer's default).
pub fn write_parquet(
    dir: &Path,
    schema: &SchemaRef,
    batches: &[RecordBatch],
    parts: usize,
) -> Result<(), Box<dyn Error>> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    std::fs::create_dir_all(dir)?;
    let per = batches.len().div_ceil(parts).max(1);
    for (i, part) in batches.chunks(per).enumerate() {
        let file = std::fs::File::create(dir.join(format!("part-{i}.parquet")))?;
        let mut writer = ArrowWriter::try_new(file, schema.clone(), None)?;
        for b in part {
            writer.write(b)?;
        }
        writer.close()?;
    }
    Ok(())
}

/// Registers the Parquet files in `dir` as the table `name` of `sql`.
pub async fn register_parquet(sql: &SessionContext, name: &str, dir: &Path) -> Result<()> {
    let path = dir
        .to_str()
        .ok_or_else(|| DataFusionError::Plan(format!("{} is not UTF-8", dir.display())))?;
    sql.register_parquet(name, path, Default::default()).await
}
