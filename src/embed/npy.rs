//! The vectors file format: a NumPy `.npy` (format 1.0, little-endian `<f4` or `<f2`, C order,
//! shape `(rows, dim)`, data 64-byte aligned after the header so it can be memory-mapped) and a
//! sibling `.ids` file with one row id per line, row `i` of the matrix for line `i`.

use std::io::Write;
use std::path::Path;

use half::f16;

use crate::dataset::AtomicWriter;
use crate::error::{Error, Result};

/// Element type of a written matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NpyDType {
    /// `<f4`.
    #[default]
    F32,
    /// `<f2` (half the size; about 3 significant digits).
    F16,
}

impl NpyDType {
    /// Parses `f32` or `f16`.
    pub fn parse(text: &str) -> Result<Self> {
        match text {
            "f32" => Ok(Self::F32),
            "f16" => Ok(Self::F16),
            other => Err(Error::invalid(
                "dtype",
                format!("'{other}' (expected f32 or f16)"),
            )),
        }
    }

    fn descr(self) -> &'static str {
        match self {
            Self::F32 => "<f4",
            Self::F16 => "<f2",
        }
    }
}

const MAGIC: &[u8] = b"\x93NUMPY";

fn header(dtype: NpyDType, rows: usize, dim: usize) -> Vec<u8> {
    let dict = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': ({rows}, {dim}), }}",
        dtype.descr()
    );
    // magic (6) + version (2) + header length (2) + dict + padding + '\n', a multiple of 64.
    let unpadded = MAGIC.len() + 4 + dict.len() + 1;
    let padding = unpadded.next_multiple_of(64) - unpadded;
    let len = dict.len() + padding + 1;
    let mut out = Vec::with_capacity(unpadded + padding);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    // The dict is short ASCII; its length always fits a u16.
    out.extend_from_slice(&(len as u16).to_le_bytes());
    out.extend_from_slice(dict.as_bytes());
    out.extend(std::iter::repeat_n(b' ', padding));
    out.push(b'\n');
    out
}

/// Writes `data` (`rows x dim`, row-major) to `path` as `.npy`, atomically.
pub fn write_npy(path: &Path, data: &[f32], dim: usize, dtype: NpyDType) -> Result<()> {
    if dim == 0 || !data.len().is_multiple_of(dim) {
        return Err(Error::invalid(
            "matrix",
            format!("{} values do not make rows of {dim}", data.len()),
        ));
    }
    let mut out = AtomicWriter::create(path)?;
    let rows = data.len() / dim;
    let mut bytes = header(dtype, rows, dim);
    match dtype {
        NpyDType::F32 => bytes.extend(data.iter().flat_map(|v| v.to_le_bytes())),
        NpyDType::F16 => bytes.extend(data.iter().flat_map(|v| f16::from_f32(*v).to_le_bytes())),
    }
    out.write_all(&bytes).map_err(|e| Error::io(path, e))?;
    out.commit()
}

/// Writes one id per line to `path`, atomically. Ids must not contain line breaks.
pub fn write_ids(path: &Path, ids: &[String]) -> Result<()> {
    if let Some(bad) = ids.iter().find(|id| id.contains(['\n', '\r'])) {
        return Err(Error::invalid(
            "id",
            format!("{bad:?} contains a line break"),
        ));
    }
    let mut out = AtomicWriter::create(path)?;
    let mut text = String::with_capacity(ids.iter().map(|id| id.len() + 1).sum());
    for id in ids {
        text.push_str(id);
        text.push('\n');
    }
    out.write_all(text.as_bytes())
        .map_err(|e| Error::io(path, e))?;
    out.commit()
}

/// The layout of a 2-D float `.npy`: element type, rows, columns and where the data starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NpyLayout {
    /// Element type.
    pub dtype: NpyDType,
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub dim: usize,
    /// Byte offset of the first element.
    pub data_offset: usize,
}

impl NpyLayout {
    /// Bytes per element.
    pub fn element_bytes(&self) -> usize {
        match self.dtype {
            NpyDType::F32 => 4,
            NpyDType::F16 => 2,
        }
    }

    /// Parses the header of `bytes` (the whole file, `path` for errors) and checks that the
    /// data length matches the shape.
    pub fn parse(path: &Path, bytes: &[u8]) -> Result<Self> {
        let bad = |m: &str| Error::parse(path, 1, format!("not a 2-D float .npy: {m}"));
        if bytes.len() < 10 || &bytes[..6] != MAGIC {
            return Err(bad("bad magic"));
        }
        let (header_len, start) = match bytes[6] {
            1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
            2 | 3 if bytes.len() >= 12 => (
                u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
                12,
            ),
            _ => return Err(bad("unsupported version")),
        };
        let dict = bytes
            .get(start..start + header_len)
            .and_then(|h| std::str::from_utf8(h).ok())
            .ok_or_else(|| bad("truncated header"))?;
        if dict.contains("'fortran_order': True") {
            return Err(bad("Fortran order"));
        }
        let dtype = if dict.contains("'<f4'") {
            NpyDType::F32
        } else if dict.contains("'<f2'") {
            NpyDType::F16
        } else {
            return Err(bad("dtype is not <f4 or <f2"));
        };
        let shape = dict
            .split_once("'shape': (")
            .and_then(|(_, rest)| rest.split_once(')'))
            .map(|(s, _)| s)
            .ok_or_else(|| bad("no shape"))?;
        let dims: Vec<usize> = shape
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| s.parse().map_err(|_| bad("bad shape")))
            .collect::<Result<_>>()?;
        let [rows, dim] = dims[..] else {
            return Err(bad("not 2-D"));
        };
        let layout = Self {
            dtype,
            rows,
            dim,
            data_offset: start + header_len,
        };
        if bytes.len() - layout.data_offset != rows * dim * layout.element_bytes() {
            return Err(bad("data length does not match the shape"));
        }
        Ok(layout)
    }

    /// The header [`write_npy`] writes for this dtype and shape (64-byte aligned).
    pub fn header(dtype: NpyDType, rows: usize, dim: usize) -> Vec<u8> {
        header(dtype, rows, dim)
    }
}

/// Reads a 2-D `<f4` or `<f2` `.npy` written by [`write_npy`] (or NumPy) as `(rows, dim, data)`.
pub fn read_npy_f32(path: &Path) -> Result<(usize, usize, Vec<f32>)> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    let layout = NpyLayout::parse(path, &bytes)?;
    let body = &bytes[layout.data_offset..];
    let data = match layout.dtype {
        NpyDType::F32 => body
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        NpyDType::F16 => body
            .chunks_exact(2)
            .map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32())
            .collect(),
    };
    Ok((layout.rows, layout.dim, data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npy_round_trip_and_alignment() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.npy");
        let data = [1.0f32, -2.5, 0.125, 3.0, 0.0, 1e-3];
        write_npy(&path, &data, 3, NpyDType::F32).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!((bytes.len() - data.len() * 4) % 64, 0);
        assert_eq!(read_npy_f32(&path).unwrap(), (2, 3, data.to_vec()));
        write_npy(&path, &data, 2, NpyDType::F16).unwrap();
        let (rows, dim, back) = read_npy_f32(&path).unwrap();
        assert_eq!((rows, dim), (3, 2));
        for (a, b) in data.iter().zip(back) {
            assert!((a - b).abs() < 1e-3);
        }
        assert!(write_npy(&path, &data, 4, NpyDType::F32).is_err());
    }

    #[test]
    fn ids_one_per_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v.ids");
        write_ids(&path, &["a b".to_string(), "c".to_string()]).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "a b\nc\n");
        assert!(write_ids(&path, &["x\ny".to_string()]).is_err());
    }
}
