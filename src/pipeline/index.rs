//! The index stage: the hybrid index (BM25 and the dense models of `[retrieval]`) over the
//! corpus, in `work/index`.

use super::manifest::stage_fingerprint;
use super::orchestrator::{Builder, StageOutcome, layout};
use crate::embed::EncoderOptions;
use crate::error::Result;
use crate::index::Bm25Settings;
use crate::progress::Progress;
use crate::search::{HybridIndexConfig, build_hybrid_index};

impl Builder<'_> {
    pub(super) fn index(
        &mut self,
        progress: &dyn Progress,
        on_stage: &mut dyn FnMut(&StageOutcome),
    ) -> Result<()> {
        let fingerprint = stage_fingerprint("index")
            .json("retrieval", &self.config.retrieval)
            .maybe_fingerprint("corpus", self.hash(layout::CORPUS))
            .finish();
        let manifest = format!("{}/{}", layout::INDEX, crate::index::MANIFEST_FILE);
        self.stage("index", fingerprint, &[&manifest], on_stage, |b| {
            let r = &b.config.retrieval;
            let index = HybridIndexConfig {
                corpus: b.path(layout::CORPUS),
                bm25: r.bm25.then(Bm25Settings::default),
                dense: r.dense.clone(),
                encoder: EncoderOptions {
                    max_batch_tokens: r.max_batch_tokens,
                    dimensions: r.dimensions,
                    ..EncoderOptions::default()
                },
                ..HybridIndexConfig::default()
            };
            let summary = build_hybrid_index(&index, &b.path(layout::INDEX), progress)?;
            let models: Vec<&str> = summary
                .manifest
                .dense
                .iter()
                .map(|d| d.name.as_str())
                .collect();
            Ok(format!(
                "{} documents indexed (bm25: {}, dense: {})",
                summary.num_documents,
                if r.bm25 { "yes" } else { "no" },
                if models.is_empty() {
                    "none".to_string()
                } else {
                    models.join(", ")
                }
            ))
        })
    }
}
