//! Reading Parquet datasets (the Hugging Face `freshstack/*` files) row by row through the
//! `parquet` crate's record API, without Arrow: each row becomes JSON and is deserialised into
//! the same types the JSONL readers produce ([`Question`](super::Question),
//! [`Document`](super::Document)), so both formats share one schema and one set of checks.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::schema::types::Type;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};

/// Reads every row of the Parquet file `path` into `T`. Only the `required` and (when present)
/// `optional` top-level columns are decoded; a missing required column is an error naming the
/// file, the column and the columns the file has; a row that does not fit `T` names its row
/// number (1-based) and serde's reason.
pub fn read_parquet<T: DeserializeOwned>(
    path: &Path,
    required: &[&str],
    optional: &[&str],
) -> Result<Vec<T>> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let reader = SerializedFileReader::new(file)
        .map_err(|e| Error::dataset(path, format!("not a readable Parquet file: {e}")))?;
    let root = reader
        .metadata()
        .file_metadata()
        .schema_descr()
        .root_schema();
    let fields = root.get_fields();
    let names: Vec<&str> = fields.iter().map(|f| f.name()).collect();
    if let Some(missing) = required.iter().find(|c| !names.contains(c)) {
        return Err(Error::dataset(
            path,
            format!("no column {missing:?} (the file has: {})", names.join(", ")),
        ));
    }
    let wanted: Vec<Arc<Type>> = fields
        .iter()
        .filter(|f| required.contains(&f.name()) || optional.contains(&f.name()))
        .cloned()
        .collect();
    let projection = Type::group_type_builder(root.name())
        .with_fields(wanted)
        .build()
        .map_err(|e| Error::dataset(path, format!("cannot select columns: {e}")))?;
    let num_rows = usize::try_from(reader.metadata().file_metadata().num_rows()).unwrap_or(0);
    let mut out = Vec::with_capacity(num_rows);
    let rows = reader
        .get_row_iter(Some(projection))
        .map_err(|e| Error::dataset(path, format!("cannot read rows: {e}")))?;
    for (i, row) in rows.enumerate() {
        let row = row.map_err(|e| Error::dataset(path, format!("row {}: {e}", i + 1)))?;
        let mut value = row.to_json_value();
        drop_nulls(&mut value);
        let record = serde_json::from_value(value)
            .map_err(|e| Error::dataset(path, format!("row {}: {e}", i + 1)))?;
        out.push(record);
    }
    Ok(out)
}

/// Removes null-valued fields of every object in `value`: a null Parquet cell reads as an
/// absent field, so serde defaults apply (an empty list, an empty title) and a required field
/// is reported missing by name.
fn drop_nulls(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(drop_nulls);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_cells_read_as_absent_fields() {
        let mut row = serde_json::json!({"query_id": "1", "query_title": null,
            "nuggets": [{"_id": "1_0", "relevant_corpus_ids": null, "text": "t"}]});
        drop_nulls(&mut row);
        let q: crate::dataset::Question = serde_json::from_value(row).unwrap();
        assert_eq!(q.query_title, "");
        assert!(q.nuggets[0].relevant_corpus_ids.is_empty());
    }

    #[test]
    fn garbage_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.parquet");
        std::fs::write(&path, b"not parquet at all").unwrap();
        let err = read_parquet::<serde_json::Value>(&path, &["_id"], &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("x.parquet") && err.contains("Parquet"),
            "{err}"
        );
    }
}
