//! Cross-encoder reranking (paper §6 reranks the top 50 of each first-stage run), locally
//! through candle.
//!
//! Owns: the [`Reranker`] trait (pairs in, scores out; no candle types), the [`CrossEncoder`]
//! (BERT-style `BertForSequenceClassification` such as cross-encoder/ms-marco-MiniLM-L-6-v2, and
//! XLM-RoBERTa-style `XLMRobertaForSequenceClassification` such as BAAI/bge-reranker-base and
//! -v2-m3), and reranking a [`Run`](crate::dataset::Run) ([`rerank_run`], [`rerank_files`]).
//!
//! Guarantees: pairs are tokenized as `(query, document)` with only the document cut to the
//! model's max length (both when the query alone is too long); batches are length-sorted and
//! bounded by a padded-token budget; scores come back in input order and do not depend on the
//! thread count. Layer: imports `embed` (model resolution, manifests, the BERT backbone,
//! batching) and `dataset`; imported by `cli`.

mod cross_encoder;
mod rerank_run;

pub use cross_encoder::{
    CrossEncoder, DEFAULT_RERANK_MAX_LENGTH, PairScores, Reranker, RerankerOptions,
};
pub use rerank_run::{
    DEFAULT_RERANK_DEPTH, RerankFiles, RerankJob, RerankReport, RerankSummary, read_document_texts,
    rerank_file, rerank_files, rerank_run, top_document_ids,
};
