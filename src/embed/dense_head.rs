//! sentence-transformers `Dense` modules: the linear projections a model's `modules.json` lists
//! after pooling, applied in order before normalisation (EmbeddingGemma: 768 -> 3072 -> 768).
//! Each is `DIR/config.json` (`in_features`, `out_features`, `bias`, `activation_function`) and
//! `DIR/model.safetensors` (`linear.weight`, `linear.bias`).
//!
//! Matryoshka heads (Stella v5): when the last module's folder ends in `_N` and sibling
//! folders `STEM_M` hold other widths (`2_Dense_256` .. `2_Dense_8192`), each is a separately
//! trained projection to `M` values; asking for a width loads that folder instead.

use std::path::Path;

use candle_core::{DType, Device, Module, Tensor};
use serde::Deserialize;

use crate::dataset::bounded::{MAX_SETTINGS_BYTES, read_text};
use crate::error::{Error, Result};

/// The `Dense` modules of one model, in `modules.json` order.
pub(crate) struct DenseHead {
    layers: Vec<DenseLayer>,
    /// The widths of the last module's sibling folders (Matryoshka heads), ascending.
    widths: Vec<usize>,
}

struct DenseLayer {
    linear: candle_nn::Linear,
    tanh: bool,
}

#[derive(Deserialize)]
struct ModuleEntry {
    #[serde(default)]
    idx: usize,
    #[serde(default)]
    path: String,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Deserialize)]
struct DenseConfig {
    in_features: usize,
    out_features: usize,
    #[serde(default = "yes")]
    bias: bool,
    #[serde(default = "identity")]
    activation_function: String,
}

fn yes() -> bool {
    true
}

fn identity() -> String {
    "torch.nn.modules.linear.Identity".to_string()
}

impl DenseHead {
    /// The `Dense` modules of the model in `dir` (none without a `modules.json` or without such
    /// modules), loaded in f32 on `device`; the first must take `hidden` features and each the
    /// previous one's output. `width`: load the last module's sibling folder of that width when
    /// there is one (Matryoshka heads). Errors name the model `name` and the file.
    pub(crate) fn load(
        dir: &Path,
        name: &str,
        hidden: usize,
        width: Option<usize>,
        device: &Device,
    ) -> Result<Option<Self>> {
        let modules = dir.join("modules.json");
        if !modules.is_file() {
            return Ok(None);
        }
        let text = read_text(&modules, MAX_SETTINGS_BYTES).map_err(|e| Error::io(&modules, e))?;
        let mut entries: Vec<ModuleEntry> = serde_json::from_str(&text)
            .map_err(|e| Error::model(name, format!("{}: {e}", modules.display())))?;
        entries.sort_by_key(|e| e.idx);
        entries.retain(|e| e.kind.ends_with(".Dense"));
        let widths = match entries.last() {
            Some(last) => sibling_widths(dir, &last.path),
            None => Vec::new(),
        };
        if let (Some(width), Some(last)) = (width, entries.last_mut())
            && widths.contains(&width)
        {
            last.path = format!("{}_{width}", width_stem(&last.path));
        }
        let mut layers = Vec::new();
        let mut features = hidden;
        for entry in &entries {
            let layer_dir = dir.join(&entry.path);
            let config_path = layer_dir.join("config.json");
            let text = read_text(&config_path, MAX_SETTINGS_BYTES)
                .map_err(|e| Error::io(&config_path, e))?;
            let config: DenseConfig = serde_json::from_str(&text)
                .map_err(|e| Error::model(name, format!("{}: {e}", config_path.display())))?;
            let tanh = match config.activation_function.as_str() {
                "torch.nn.modules.linear.Identity" => false,
                "torch.nn.modules.activation.Tanh" => true,
                other => {
                    return Err(Error::model(
                        name,
                        format!(
                            "{}: activation {other} is not supported (Identity, Tanh)",
                            config_path.display()
                        ),
                    ));
                }
            };
            if config.in_features != features {
                return Err(Error::model(
                    name,
                    format!(
                        "{}: in_features {} does not follow the {features} features before it",
                        config_path.display(),
                        config.in_features
                    ),
                ));
            }
            let weights = layer_dir.join("model.safetensors");
            if !weights.is_file() {
                return Err(Error::model(
                    name,
                    format!(
                        "{} is missing (only safetensors are read)",
                        weights.display()
                    ),
                ));
            }
            // SAFETY: read-only map of a weights file, as for the model's own weights.
            let vb = unsafe {
                candle_nn::VarBuilder::from_mmaped_safetensors(&[&weights], DType::F32, device)
            }
            .map_err(|e| Error::model(name, format!("{}: {e}", weights.display())))?;
            let (inputs, outputs) = (config.in_features, config.out_features);
            let linear = if config.bias {
                candle_nn::linear(inputs, outputs, vb.pp("linear"))
            } else {
                candle_nn::linear_no_bias(inputs, outputs, vb.pp("linear"))
            }
            .map_err(|e| Error::model(name, format!("{}: {e}", weights.display())))?;
            layers.push(DenseLayer { linear, tanh });
            features = outputs;
        }
        Ok((!layers.is_empty()).then_some(Self { layers, widths }))
    }

    /// The widths of the Matryoshka heads beside the last module (empty when it has none).
    pub(crate) fn widths(&self) -> &[usize] {
        &self.widths
    }

    /// The width of the vectors the head returns.
    pub(crate) fn out_features(&self) -> Option<usize> {
        self.layers.last().map(|l| l.linear.weight().dims()[0])
    }

    /// Applies every module to pooled `[batch, features]` f32 rows.
    pub(crate) fn forward(&self, pooled: &Tensor) -> candle_core::Result<Tensor> {
        let mut x = pooled.clone();
        for layer in &self.layers {
            x = layer.linear.forward(&x)?;
            if layer.tanh {
                x = x.tanh()?;
            }
        }
        Ok(x)
    }
}

/// `path` without a trailing `_N` (`2_Dense_1024` -> `2_Dense`).
fn width_stem(path: &str) -> &str {
    match path.rsplit_once('_') {
        Some((stem, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => stem,
        _ => path,
    }
}

/// The widths `M` of folders `STEM_M` in `dir`, `STEM` being `path`'s [`width_stem`], when
/// `path` itself ends in `_N` (a folder without a width has no Matryoshka siblings).
fn sibling_widths(dir: &Path, path: &str) -> Vec<usize> {
    let stem = width_stem(path);
    if stem == path || stem.contains('/') {
        return Vec::new();
    }
    let mut widths: Vec<usize> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.path().join("config.json").is_file())
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let n = name.strip_prefix(stem)?.strip_prefix('_')?;
            (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                .then(|| n.parse().ok())
                .flatten()
        })
        .collect();
    widths.sort_unstable();
    widths.dedup();
    widths
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn write_dense(dir: &Path, folder: &str, config: &str, weight: Tensor) {
        let d = dir.join(folder);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("config.json"), config).unwrap();
        let tensors: HashMap<String, Tensor> = [("linear.weight".to_string(), weight)].into();
        candle_core::safetensors::save(&tensors, d.join("model.safetensors")).unwrap();
    }

    #[test]
    fn dense_modules_apply_in_order_and_check_their_shapes() {
        let dir = tempfile::tempdir().unwrap();
        let dev = Device::Cpu;
        std::fs::write(
            dir.path().join("modules.json"),
            r#"[{"idx": 2, "name": "2", "path": "3_Dense", "type": "sentence_transformers.models.Dense"},
                {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}]"#,
        )
        .unwrap();
        let no_bias = |i, o| {
            format!(
                r#"{{"in_features": {i}, "out_features": {o}, "bias": false,
                "activation_function": "torch.nn.modules.linear.Identity"}}"#
            )
        };
        // 2 -> 3 (idx 1, applied first), then 3 -> 2 (idx 2).
        let first = Tensor::new(&[[1f32, 0.], [0., 1.], [1., 1.]], &dev).unwrap();
        let second = Tensor::new(&[[1f32, 0., 1.], [0., 2., 0.]], &dev).unwrap();
        write_dense(dir.path(), "2_Dense", &no_bias(2, 3), first);
        write_dense(dir.path(), "3_Dense", &no_bias(3, 2), second);
        let head = DenseHead::load(dir.path(), "m", 2, None, &dev)
            .unwrap()
            .unwrap();
        assert_eq!(head.out_features(), Some(2));
        let x = Tensor::new(&[[1f32, 2.]], &dev).unwrap();
        let y = head.forward(&x).unwrap().to_vec2::<f32>().unwrap();
        // [1, 2] -> [1, 2, 3] -> [1 + 3, 4].
        assert_eq!(y, vec![vec![4f32, 4.]]);
        // A head that does not take the model's width is an error naming the file.
        let err = DenseHead::load(dir.path(), "m", 5, None, &dev)
            .err()
            .unwrap()
            .to_string();
        assert!(
            err.contains("2_Dense") && err.contains("in_features 2"),
            "{err}"
        );
        // No modules.json: no head.
        let empty = tempfile::tempdir().unwrap();
        assert!(
            DenseHead::load(empty.path(), "m", 2, None, &dev)
                .unwrap()
                .is_none()
        );
    }

    /// Stella-style heads: the module's folder `2_Dense_4` has siblings `2_Dense_2` and
    /// `2_Dense_6`; no width keeps the listed one, a listed sibling width loads that folder.
    #[test]
    fn matryoshka_heads_load_the_folder_of_the_asked_width() {
        let dir = tempfile::tempdir().unwrap();
        let dev = Device::Cpu;
        std::fs::write(
            dir.path().join("modules.json"),
            r#"[{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                {"idx": 2, "name": "2", "path": "2_Dense_4", "type": "sentence_transformers.models.Dense"}]"#,
        )
        .unwrap();
        let config = |o: usize| {
            format!(
                r#"{{"in_features": 3, "out_features": {o}, "bias": false,
                "activation_function": "torch.nn.modules.linear.Identity"}}"#
            )
        };
        for width in [2usize, 4, 6] {
            // Row r of head `width` is (width, r, 0): the output tells which folder ran.
            let rows: Vec<f32> = (0..width)
                .flat_map(|r| [width as f32, r as f32, 0.0])
                .collect();
            let weight = Tensor::from_vec(rows, (width, 3), &dev).unwrap();
            write_dense(
                dir.path(),
                &format!("2_Dense_{width}"),
                &config(width),
                weight,
            );
        }
        let x = Tensor::new(&[[1f32, 0., 0.]], &dev).unwrap();
        let run = |width: Option<usize>| {
            let head = DenseHead::load(dir.path(), "m", 3, width, &dev)
                .unwrap()
                .unwrap();
            assert_eq!(head.widths(), &[2, 4, 6]);
            head.forward(&x).unwrap().to_vec2::<f32>().unwrap()[0].clone()
        };
        assert_eq!(run(None), vec![4f32; 4]);
        assert_eq!(run(Some(2)), vec![2f32; 2]);
        assert_eq!(run(Some(6)), vec![6f32; 6]);
        // A width without a folder keeps the listed head (the caller refuses or truncates).
        assert_eq!(run(Some(3)), vec![4f32; 4]);
        assert_eq!(width_stem("2_Dense_1024"), "2_Dense");
        assert_eq!(width_stem("2_Dense"), "2_Dense");
    }
}
