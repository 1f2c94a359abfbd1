//! Dense vectors: a row-major `N x dim` matrix of f32 or f16 in a NumPy `.npy` file, memory
//! mapped, plus the `.ids` file naming each row (`vectors.npy` -> `vectors.ids`).
//!
//! The `.npy` format (NumPy's `format.py`): magic `\x93NUMPY`, version byte pair, a header
//! length (u16 little-endian in version 1, u32 in 2 and 3), then a Python dict literal with
//! `descr`, `fortran_order` and `shape`, padded with spaces and a newline; the data follows.
//! We read little-endian `<f4` / `<f2`, C order, 2-D only, and write version 1 with the data
//! aligned to 64 bytes.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use half::f16;
use memmap2::Mmap;

use crate::dataset::AtomicWriter;
use crate::error::{Error, Result};

/// Element type of a stored matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dtype {
    /// IEEE half precision (`<f2`).
    F16,
    /// IEEE single precision (`<f4`).
    F32,
}

impl Dtype {
    /// `f16` or `f32`.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F16 => "f16",
            Dtype::F32 => "f32",
        }
    }

    /// Parses `f16` / `f32`.
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "f16" => Ok(Dtype::F16),
            "f32" => Ok(Dtype::F32),
            other => Err(Error::invalid(
                "dtype",
                format!("{other:?}: expected f16 or f32"),
            )),
        }
    }

    fn bytes(self) -> usize {
        match self {
            Dtype::F16 => 2,
            Dtype::F32 => 4,
        }
    }

    fn descr(self) -> &'static str {
        match self {
            Dtype::F16 => "<f2",
            Dtype::F32 => "<f4",
        }
    }
}

/// A memory-mapped `rows x dim` matrix.
pub struct VectorMatrix {
    path: PathBuf,
    map: Mmap,
    offset: usize,
    rows: usize,
    dim: usize,
    dtype: Dtype,
}

impl std::fmt::Debug for VectorMatrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VectorMatrix")
            .field("path", &self.path)
            .field("rows", &self.rows)
            .field("dim", &self.dim)
            .field("dtype", &self.dtype)
            .finish()
    }
}

impl VectorMatrix {
    /// Maps the `.npy` file at `path`, validating its header against its size.
    pub fn open(path: &Path) -> Result<Self> {
        let bad = |message: String| Error::parse(path, 1, message);
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        // SAFETY: the map is read-only; index files are written once (temp dir + rename) and
        // never modified in place, so the bytes do not change under us.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
        if map.len() < 10 || &map[..6] != b"\x93NUMPY" {
            return Err(bad("not a .npy file (bad magic)".into()));
        }
        let (header_len, start) = match map[6] {
            1 => (usize::from(u16::from_le_bytes([map[8], map[9]])), 10),
            2 | 3 if map.len() >= 12 => (
                u32::from_le_bytes([map[8], map[9], map[10], map[11]]) as usize,
                12,
            ),
            v => return Err(bad(format!("unsupported .npy version {v}"))),
        };
        let offset = start + header_len;
        let header = map
            .get(start..offset)
            .ok_or_else(|| bad("truncated .npy header".into()))?;
        let header = std::str::from_utf8(header).map_err(|_| bad("non-UTF-8 header".into()))?;
        let descr = dict_value(header, "descr").ok_or_else(|| bad("header has no descr".into()))?;
        let dtype = match descr.trim_matches(['\'', '"']) {
            "<f4" => Dtype::F32,
            "<f2" => Dtype::F16,
            other => {
                return Err(bad(format!(
                    "dtype {other}: expected little-endian float32 (<f4) or float16 (<f2)"
                )));
            }
        };
        if dict_value(header, "fortran_order").is_some_and(|v| v.starts_with("True")) {
            return Err(bad("Fortran-order arrays are not supported".into()));
        }
        let shape = dict_value(header, "shape").ok_or_else(|| bad("header has no shape".into()))?;
        let dims: Vec<usize> = shape
            .trim_start_matches('(')
            .split(')')
            .next()
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| s.parse::<usize>())
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| bad(format!("bad shape {shape}")))?;
        let [rows, dim] = dims[..] else {
            return Err(bad(format!("shape {shape}: expected a 2-D matrix")));
        };
        if dim == 0 {
            return Err(bad("dimension 0".into()));
        }
        let need = rows
            .checked_mul(dim)
            .and_then(|n| n.checked_mul(dtype.bytes()))
            .and_then(|n| n.checked_add(offset))
            .ok_or_else(|| bad(format!("shape {shape} overflows")))?;
        if map.len() != need {
            return Err(bad(format!(
                "file has {} bytes, shape {shape} of {} needs {need}",
                map.len(),
                dtype.name()
            )));
        }
        Ok(Self {
            path: path.to_path_buf(),
            map,
            offset,
            rows,
            dim,
            dtype,
        })
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Vector dimension.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// Element type.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Row `row`'s stored bytes (little-endian `dim` values of the matrix's dtype).
    pub(crate) fn row_bytes(&self, row: usize) -> &[u8] {
        let width = self.dim * self.dtype.bytes();
        let start = self.offset + row * width;
        &self.map[start..start + width]
    }

    /// Copies row `row` into `out` as f32 (`out.len() == dim`).
    pub fn row_into(&self, row: usize, out: &mut [f32]) {
        let bytes = self.row_bytes(row);
        match self.dtype {
            Dtype::F32 => {
                for (o, c) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                    *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                }
            }
            Dtype::F16 => {
                for (o, c) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                    *o = f16::from_le_bytes([c[0], c[1]]).to_f32();
                }
            }
        }
    }

    /// Row `row` as f32.
    pub fn row(&self, row: usize) -> Vec<f32> {
        let mut out = vec![0f32; self.dim];
        self.row_into(row, &mut out);
        out
    }

    /// Row `row` as an f32 slice without copying, when the matrix is f32 and aligned.
    pub fn row_f32(&self, row: usize) -> Option<&[f32]> {
        if self.dtype != Dtype::F32 || cfg!(target_endian = "big") {
            return None;
        }
        let bytes = self.row_bytes(row);
        // SAFETY: every bit pattern is a valid f32; align_to only yields the aligned middle.
        let (head, body, tail) = unsafe { bytes.align_to::<f32>() };
        (head.is_empty() && tail.is_empty()).then_some(body)
    }
}

/// The value text after `'key':` in a NumPy header dict (up to the next top-level comma).
fn dict_value<'a>(header: &'a str, key: &str) -> Option<&'a str> {
    let at = header
        .find(&format!("'{key}'"))
        .or_else(|| header.find(&format!("\"{key}\"")))?;
    let rest = header[at + key.len() + 2..].trim_start();
    let rest = rest.strip_prefix(':')?.trim_start();
    if rest.starts_with('(') {
        let end = rest.find(')')?;
        Some(&rest[..=end])
    } else {
        let end = rest.find([',', '}']).unwrap_or(rest.len());
        Some(rest[..end].trim())
    }
}

/// Writes rows (each `dim` f32 values, as produced by `row(i, buf)`) as a `.npy` of `dtype`.
pub fn write_npy(
    path: &Path,
    rows: usize,
    dim: usize,
    dtype: Dtype,
    mut row: impl FnMut(usize, &mut [f32]),
) -> Result<()> {
    let mut out = AtomicWriter::create(path)?;
    let dict = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': ({rows}, {dim}), }}",
        dtype.descr()
    );
    // Header (10 bytes of preamble + dict + padding + '\n') padded to a multiple of 64.
    let unpadded = 10 + dict.len() + 1;
    let padding = (64 - unpadded % 64) % 64;
    let header_len = dict.len() + padding + 1;
    let io = |e| Error::io(path, e);
    out.write_all(b"\x93NUMPY\x01\x00").map_err(io)?;
    let header_len = u16::try_from(header_len)
        .map_err(|_| Error::invalid("npy header", "longer than 65535 bytes"))?;
    out.write_all(&header_len.to_le_bytes()).map_err(io)?;
    out.write_all(dict.as_bytes()).map_err(io)?;
    out.write_all(&vec![b' '; padding]).map_err(io)?;
    out.write_all(b"\n").map_err(io)?;
    let mut buf = vec![0f32; dim];
    let mut bytes = Vec::with_capacity(dim * 4);
    for i in 0..rows {
        row(i, &mut buf);
        bytes.clear();
        match dtype {
            Dtype::F32 => buf.iter().for_each(|v| bytes.extend(v.to_le_bytes())),
            Dtype::F16 => buf
                .iter()
                .for_each(|v| bytes.extend(f16::from_f32(*v).to_le_bytes())),
        }
        out.write_all(&bytes).map_err(io)?;
    }
    out.commit()
}

/// The `.ids` path next to a `.npy`: `vectors.npy` -> `vectors.ids`.
pub fn ids_path(npy: &Path) -> PathBuf {
    npy.with_extension("ids")
}

/// Reads a `.ids` file: one id per line, blank lines are an error (they would shift rows).
pub fn read_ids(path: &Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    let mut ids = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.is_empty() {
            return Err(Error::parse(path, i + 1, "empty id"));
        }
        ids.push(line.to_string());
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npy_round_trip_f16_and_f32() {
        let dir = tempfile::tempdir().unwrap();
        for dtype in [Dtype::F32, Dtype::F16] {
            let path = dir.path().join(format!("m_{}.npy", dtype.name()));
            write_npy(&path, 3, 5, dtype, |i, row| {
                for (j, v) in row.iter_mut().enumerate() {
                    *v = (i * 10 + j) as f32 * 0.5;
                }
            })
            .unwrap();
            let m = VectorMatrix::open(&path).unwrap();
            assert_eq!((m.rows(), m.dim(), m.dtype()), (3, 5, dtype));
            assert_eq!(m.row(2), [10.0, 10.5, 11.0, 11.5, 12.0]);
            assert_eq!(std::fs::metadata(&path).unwrap().len() % 2, 0);
            if dtype == Dtype::F32 {
                assert_eq!(m.row_f32(1).unwrap(), [5.0, 5.5, 6.0, 6.5, 7.0]);
            }
        }
    }

    #[test]
    fn truncated_npy_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.npy");
        write_npy(&path, 4, 4, Dtype::F32, |_, _| {}).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 3]).unwrap();
        let err = VectorMatrix::open(&path).unwrap_err().to_string();
        assert!(err.contains("needs"), "{err}");
        std::fs::write(&path, b"hello").unwrap();
        assert!(VectorMatrix::open(&path).is_err());
    }
}
