//! The vectors file format, for `embed`'s outputs, an index's stored matrices and `retrieve`'s
//! query vectors alike: a row-major `rows x dim` matrix of f32 or f16 in a NumPy `.npy` file,
//! plus a sibling `.ids` file naming each row (`vectors.npy` -> `vectors.ids`, row `i` for line
//! `i`).
//!
//! The `.npy` format (NumPy's `format.py`): magic `\x93NUMPY`, a version byte pair, a header
//! length (u16 little-endian in version 1, u32 in 2 and 3), then a Python dict literal with
//! `descr`, `fortran_order` and `shape`, padded with spaces and a newline; the data follows. We
//! read little-endian `<f4` / `<f2`, C order, 2-D only, from any of the three versions, and write
//! version 1 with the header padded so the data starts at a multiple of 64 bytes (the matrix can
//! be memory-mapped and read as aligned f32 rows). Reading maps the file ([`VectorMatrix`]);
//! writing streams rows through [`NpyWriter`] into a temporary file renamed at the end.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use half::f16;
use memmap2::Mmap;

use super::atomic::AtomicWriter;
use crate::error::{Error, Result, Setting};

/// Element type of a stored matrix.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum VectorDtype {
    /// IEEE half precision (`<f2`: half the size, about 3 significant digits).
    F16,
    /// IEEE single precision (`<f4`).
    #[default]
    F32,
}

impl VectorDtype {
    /// `f16` or `f32`.
    pub fn name(self) -> &'static str {
        match self {
            Self::F16 => "f16",
            Self::F32 => "f32",
        }
    }

    /// Bytes per element.
    pub fn element_bytes(self) -> usize {
        match self {
            Self::F16 => 2,
            Self::F32 => 4,
        }
    }

    fn descr(self) -> &'static str {
        match self {
            Self::F16 => "<f2",
            Self::F32 => "<f4",
        }
    }
}

impl std::str::FromStr for VectorDtype {
    type Err = Error;

    /// Parses `f32` or `f16`.
    fn from_str(name: &str) -> Result<Self> {
        match name {
            "f32" => Ok(Self::F32),
            "f16" => Ok(Self::F16),
            other => Err(Error::invalid(
                Setting::Dtype,
                format!("'{other}' (expected f32 or f16)"),
            )),
        }
    }
}

const MAGIC: &[u8] = b"\x93NUMPY";

/// A memory-mapped `rows x dim` matrix.
pub struct VectorMatrix {
    path: PathBuf,
    map: Mmap,
    offset: usize,
    rows: usize,
    dim: usize,
    dtype: VectorDtype,
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
    /// Maps the `.npy` file at `path`, validating its header against its size. Every problem is
    /// an error naming the file: bad magic, an unknown version, a truncated or non-UTF-8 header,
    /// a dtype other than `<f4`/`<f2`, Fortran order, a shape that is not 2-D or has dimension
    /// 0, or a data length that does not match the shape.
    pub fn open(path: &Path) -> Result<Self> {
        let bad = |message: String| Error::parse(path, 1, message);
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        // SAFETY: the map is read-only; vectors files are written once (a temporary file
        // renamed into place) and never modified in place, so the bytes do not change under us.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| Error::io(path, e))?;
        if map.len() < 10 || &map[..6] != MAGIC {
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
            "<f4" => VectorDtype::F32,
            "<f2" => VectorDtype::F16,
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
            .and_then(|n| n.checked_mul(dtype.element_bytes()))
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
    pub fn dtype(&self) -> VectorDtype {
        self.dtype
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Row `row`'s stored bytes (little-endian `dim` values of the matrix's dtype).
    pub(crate) fn row_bytes(&self, row: usize) -> &[u8] {
        let width = self.dim * self.dtype.element_bytes();
        let start = self.offset + row * width;
        &self.map[start..start + width]
    }

    /// Copies row `row` into `out` as f32 (`out.len() == dim`).
    pub fn row_into(&self, row: usize, out: &mut [f32]) {
        let bytes = self.row_bytes(row);
        match self.dtype {
            VectorDtype::F32 => {
                for (o, c) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                    *o = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                }
            }
            VectorDtype::F16 => {
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
        if self.dtype != VectorDtype::F32 || cfg!(target_endian = "big") {
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

/// Reads a whole matrix (see [`VectorMatrix::open`] for what is checked) as `(rows, dim, data)`,
/// f16 widened to f32.
pub fn read_npy_f32(path: &Path) -> Result<(usize, usize, Vec<f32>)> {
    let matrix = VectorMatrix::open(path)?;
    let mut data = vec![0f32; matrix.rows * matrix.dim];
    if matrix.dim > 0 {
        for (row, out) in data.chunks_exact_mut(matrix.dim).enumerate() {
            matrix.row_into(row, out);
        }
    }
    Ok((matrix.rows, matrix.dim, data))
}

/// Writes a `.npy` matrix of a known shape row by row, atomically: [`NpyWriter::create`] writes
/// the header, each row goes out as the dtype's little-endian values, and [`NpyWriter::finish`]
/// checks that every row came and renames the file into place (dropped before, it leaves
/// nothing).
pub struct NpyWriter {
    path: PathBuf,
    out: AtomicWriter,
    dtype: VectorDtype,
    dim: usize,
    rows: usize,
    written: usize,
    bytes: Vec<u8>,
}

impl NpyWriter {
    /// Opens `path` for a `rows x dim` matrix of `dtype` and writes the header.
    pub fn create(path: &Path, dtype: VectorDtype, rows: usize, dim: usize) -> Result<Self> {
        let dict = format!(
            "{{'descr': '{}', 'fortran_order': False, 'shape': ({rows}, {dim}), }}",
            dtype.descr()
        );
        // Magic (6) + version (2) + header length (2) + dict + padding + '\n', a multiple of 64.
        let unpadded = MAGIC.len() + 4 + dict.len() + 1;
        let padding = unpadded.next_multiple_of(64) - unpadded;
        let header_len = u16::try_from(dict.len() + padding + 1)
            .map_err(|_| Error::invalid(Setting::NpyHeader, "longer than 65535 bytes"))?;
        let mut header = Vec::with_capacity(unpadded + padding);
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&[1, 0]);
        header.extend_from_slice(&header_len.to_le_bytes());
        header.extend_from_slice(dict.as_bytes());
        header.extend(std::iter::repeat_n(b' ', padding));
        header.push(b'\n');
        let mut out = AtomicWriter::create(path)?;
        out.write_all(&header).map_err(|e| Error::io(path, e))?;
        Ok(Self {
            path: path.to_path_buf(),
            out,
            dtype,
            dim,
            rows,
            written: 0,
            bytes: Vec::with_capacity(dim * dtype.element_bytes()),
        })
    }

    /// Writes the next row (`dim` values, narrowed to f16 for an f16 matrix).
    pub fn write_row(&mut self, row: &[f32]) -> Result<()> {
        if row.len() != self.dim {
            return Err(Error::invalid(
                Setting::Matrix,
                format!(
                    "a row of {} values in a matrix of dim {}",
                    row.len(),
                    self.dim
                ),
            ));
        }
        self.bytes.clear();
        match self.dtype {
            VectorDtype::F32 => row.iter().for_each(|v| self.bytes.extend(v.to_le_bytes())),
            VectorDtype::F16 => row
                .iter()
                .for_each(|v| self.bytes.extend(f16::from_f32(*v).to_le_bytes())),
        }
        self.written += 1;
        self.out
            .write_all(&self.bytes)
            .map_err(|e| Error::io(&self.path, e))
    }

    /// Writes the next row as stored bytes of this writer's dtype, copied as they are (`merge`
    /// joins shards this way, so no value is converted twice).
    pub(crate) fn write_row_bytes(&mut self, bytes: &[u8]) -> Result<()> {
        if bytes.len() != self.dim * self.dtype.element_bytes() {
            return Err(Error::invalid(
                Setting::Matrix,
                format!(
                    "a row of {} bytes in a {} matrix of dim {}",
                    bytes.len(),
                    self.dtype.name(),
                    self.dim
                ),
            ));
        }
        self.written += 1;
        self.out
            .write_all(bytes)
            .map_err(|e| Error::io(&self.path, e))
    }

    /// Checks that every row was written, then renames the file into place.
    pub fn finish(self) -> Result<()> {
        if self.written != self.rows {
            return Err(Error::invalid(
                Setting::Matrix,
                format!(
                    "{}: {} of {} rows written",
                    self.path.display(),
                    self.written,
                    self.rows
                ),
            ));
        }
        self.out.commit()
    }
}

/// Writes a `rows x dim` matrix of `dtype` to `path`, atomically, row `i` filled in by
/// `row(i, buffer)` (the buffer holds `dim` values and keeps the previous row's until
/// overwritten).
pub fn write_npy(
    path: &Path,
    rows: usize,
    dim: usize,
    dtype: VectorDtype,
    mut row: impl FnMut(usize, &mut [f32]),
) -> Result<()> {
    let mut writer = NpyWriter::create(path, dtype, rows, dim)?;
    let mut buffer = vec![0f32; dim];
    for i in 0..rows {
        row(i, &mut buffer);
        writer.write_row(&buffer)?;
    }
    writer.finish()
}

/// Writes `data` (`rows x dim`, row-major) to `path` as `.npy` of `dtype`, atomically; `data`
/// must make whole rows of a non-zero `dim`.
pub fn write_npy_matrix(path: &Path, data: &[f32], dim: usize, dtype: VectorDtype) -> Result<()> {
    if dim == 0 || !data.len().is_multiple_of(dim) {
        return Err(Error::invalid(
            Setting::Matrix,
            format!("{} values do not make rows of {dim}", data.len()),
        ));
    }
    let mut writer = NpyWriter::create(path, dtype, data.len() / dim, dim)?;
    for row in data.chunks_exact(dim) {
        writer.write_row(row)?;
    }
    writer.finish()
}

/// The `.ids` path next to a `.npy`: `vectors.npy` -> `vectors.ids`.
pub fn ids_path(npy: &Path) -> PathBuf {
    npy.with_extension("ids")
}

/// Writes one id per line to `path`, atomically. Ids must not contain line breaks.
pub fn write_ids(path: &Path, ids: &[String]) -> Result<()> {
    if let Some(bad) = ids.iter().find(|id| id.contains(['\n', '\r'])) {
        return Err(Error::invalid(
            Setting::Id,
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

/// Writes `ids` to the `.ids` file beside the matrix `npy` ([`ids_path`]), except when `npy` is
/// a stream written in place (`/dev/null`, a FIFO): a sidecar such as `/dev/null.ids` would be a
/// stray regular file, so the ids are not written and a warning says so. Returns where they went.
pub fn write_ids_beside(npy: &Path, ids: &[String]) -> Result<Option<PathBuf>> {
    if super::atomic::is_stream_target(npy) {
        tracing::warn!(
            "{} is not a regular file: the ids of its rows are not written",
            npy.display()
        );
        return Ok(None);
    }
    let path = ids_path(npy);
    write_ids(&path, ids)?;
    Ok(Some(path))
}

/// Reads a `.ids` file: one id per line, blank lines are an error (they would shift rows).
pub fn read_ids(path: &Path) -> Result<Vec<String>> {
    let text = super::bounded::read_line_string(path).map_err(|e| Error::io(path, e))?;
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
    use std::str::FromStr;

    #[test]
    fn ids_beside_a_stream_are_not_written() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("vectors.npy");
        let c_path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        assert_eq!(write_ids_beside(&fifo, &["a".into()]).unwrap(), None);
        assert!(!ids_path(&fifo).exists());
        let file = dir.path().join("file.npy");
        let written = write_ids_beside(&file, &["a".into()]).unwrap();
        assert_eq!(written, Some(ids_path(&file)));
        assert_eq!(std::fs::read_to_string(ids_path(&file)).unwrap(), "a\n");
    }

    /// A version 1 file holding `dict`, its header padded with spaces and a newline to a
    /// multiple of `align` bytes (NumPy pads to 64; versions before 1.14 padded to 16), then
    /// `data_bytes` zero bytes.
    fn npy(dict: &str, align: usize, data_bytes: usize) -> Vec<u8> {
        let total = (11 + dict.len()).next_multiple_of(align);
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        bytes.extend_from_slice(&((total - 10) as u16).to_le_bytes());
        bytes.extend_from_slice(format!("{dict:<width$}\n", width = total - 11).as_bytes());
        bytes.extend(std::iter::repeat_n(0u8, data_bytes));
        bytes
    }

    #[test]
    fn round_trip_f16_and_f32_both_writers_same_bytes() {
        let dir = tempfile::tempdir().unwrap();
        for dtype in [VectorDtype::F32, VectorDtype::F16] {
            let path = dir.path().join(format!("m_{}.npy", dtype.name()));
            let value = |i: usize, j: usize| (i * 10 + j) as f32 * 0.5;
            write_npy(&path, 3, 5, dtype, |i, row| {
                for (j, v) in row.iter_mut().enumerate() {
                    *v = value(i, j);
                }
            })
            .unwrap();
            let m = VectorMatrix::open(&path).unwrap();
            assert_eq!((m.rows(), m.dim(), m.dtype()), (3, 5, dtype));
            assert_eq!(m.row(2), [10.0, 10.5, 11.0, 11.5, 12.0]);
            if dtype == VectorDtype::F32 {
                assert_eq!(m.row_f32(1).unwrap(), [5.0, 5.5, 6.0, 6.5, 7.0]);
            }
            let bytes = std::fs::read(&path).unwrap();
            assert_eq!((bytes.len() - 15 * dtype.element_bytes()) % 64, 0);
            let data: Vec<f32> = (0..15).map(|k| value(k / 5, k % 5)).collect();
            let other = dir.path().join("other.npy");
            write_npy_matrix(&other, &data, 5, dtype).unwrap();
            assert_eq!(std::fs::read(&other).unwrap(), bytes);
            assert_eq!(read_npy_f32(&other).unwrap(), (3, 5, data));
        }
        let path = dir.path().join("x.npy");
        assert!(write_npy_matrix(&path, &[1.0, 2.0, 3.0], 2, VectorDtype::F32).is_err());
        assert!(write_npy_matrix(&path, &[], 0, VectorDtype::F32).is_err());
        assert!(!path.exists());
    }

    #[test]
    fn header_is_numpys_version_1_padded_to_64() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.npy");
        write_npy(&path, 2, 3, VectorDtype::F32, |_, _| {}).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
        assert_eq!(bytes, npy(dict, 64, 24));
        // NumPy's older 16-byte padding and a version 2 header read too.
        std::fs::write(&path, npy(dict, 16, 24)).unwrap();
        assert_eq!(VectorMatrix::open(&path).unwrap().rows(), 2);
        let mut v2 = b"\x93NUMPY\x02\x00".to_vec();
        v2.extend_from_slice(&(68u32).to_le_bytes());
        v2.extend_from_slice(format!("{dict:<67}\n").as_bytes());
        v2.extend(std::iter::repeat_n(0u8, 24));
        std::fs::write(&path, &v2).unwrap();
        assert_eq!(VectorMatrix::open(&path).unwrap().dim(), 3);
    }

    #[test]
    fn bad_files_are_errors_naming_the_problem() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.npy");
        write_npy(&path, 4, 4, VectorDtype::F32, |_, _| {}).unwrap();
        let good = std::fs::read(&path).unwrap();
        let dict = |d: &str| npy(d, 64, 16);
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (
                good[..good.len() - 3].to_vec(),
                "file has 189 bytes, shape (4, 4) of f32 needs 192",
            ),
            (good[..40].to_vec(), "truncated .npy header"),
            (b"hello".to_vec(), "bad magic"),
            (
                b"\x93NUMPY\x04\x00\x10\x00".to_vec(),
                "unsupported .npy version 4",
            ),
            (
                dict("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 1), }"),
                "dtype <f8",
            ),
            (
                dict("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }"),
                "Fortran",
            ),
            (
                dict("{'descr': '<f4', 'fortran_order': False, 'shape': (16,), }"),
                "expected a 2-D matrix",
            ),
            (
                dict("{'descr': '<f4', 'fortran_order': False, 'shape': (16, 0), }"),
                "dimension 0",
            ),
            (
                dict("{'descr': '<f4', 'fortran_order': False, 'shape': (4, x), }"),
                "bad shape",
            ),
            (
                dict("{'descr': '<f4', 'fortran_order': False, }"),
                "no shape",
            ),
            (
                dict(
                    "{'descr': '<f4', 'fortran_order': False, 'shape': (18446744073709551615, 2), }",
                ),
                "overflows",
            ),
        ];
        for (bytes, message) in cases {
            std::fs::write(&path, &bytes).unwrap();
            let err = VectorMatrix::open(&path).unwrap_err().to_string();
            assert!(
                err.contains("m.npy:1:") && err.contains(message),
                "{message}: {err}"
            );
            let err = read_npy_f32(&path).unwrap_err().to_string();
            assert!(err.contains(message), "{message}: {err}");
        }
    }

    #[test]
    fn writer_checks_rows_and_ids_are_one_per_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.npy");
        let mut writer = NpyWriter::create(&path, VectorDtype::F16, 2, 2).unwrap();
        assert!(writer.write_row(&[1.0]).is_err());
        writer.write_row(&[1.0, 2.0]).unwrap();
        assert!(writer.write_row_bytes(&[0; 3]).is_err());
        writer
            .write_row_bytes(&f16::from_f32(3.0).to_le_bytes().repeat(2))
            .unwrap();
        writer.finish().unwrap();
        assert_eq!(read_npy_f32(&path).unwrap().2, [1.0, 2.0, 3.0, 3.0]);
        let short = NpyWriter::create(&dir.path().join("s.npy"), VectorDtype::F32, 2, 2).unwrap();
        assert!(
            short
                .finish()
                .unwrap_err()
                .to_string()
                .contains("0 of 2 rows")
        );
        assert!(!dir.path().join("s.npy").exists());

        let ids = ids_path(&path);
        assert_eq!(ids, dir.path().join("m.ids"));
        write_ids(&ids, &["a b".to_string(), "c".to_string()]).unwrap();
        assert_eq!(std::fs::read_to_string(&ids).unwrap(), "a b\nc\n");
        assert_eq!(read_ids(&ids).unwrap(), ["a b", "c"]);
        assert!(write_ids(&ids, &["x\ny".to_string()]).is_err());
        std::fs::write(&ids, "a\n\nb\n").unwrap();
        assert!(
            read_ids(&ids)
                .unwrap_err()
                .to_string()
                .contains(":2: empty id")
        );
        assert_eq!(VectorDtype::from_str("f16").unwrap(), VectorDtype::F16);
        let err = VectorDtype::from_str("f64").unwrap_err().to_string();
        assert!(err.contains("'f64' (expected f32 or f16)"), "{err}");
    }
}
