import logging
import os
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

__version__: str

Run = Dict[str, Dict[str, float]]
Qrels = Dict[str, Dict[str, int]]

class FreshstackError(ValueError): ...

class EvaluateRetrieval:
    k_values: List[int]
    top_k: int
    def __init__(self, k_values: Sequence[int] = ...) -> None: ...
    def evaluate(
        self,
        qrels_nuggets: Qrels,
        query_to_nuggets: Dict[str, List[str]],
        qrels_query: Qrels,
        results: Run,
    ) -> Tuple[Dict[str, float], Dict[str, float], Dict[str, float]]: ...

def evaluate_metrics(
    qrels_nuggets: Qrels,
    query_to_nuggets: Dict[str, List[str]],
    results: Run,
    metrics: Sequence[str] = ...,
    k_values: Sequence[int] = ...,
) -> Tuple[Dict[str, float], Dict[str, Dict[str, float]]]: ...
def paired_significance(
    a: Sequence[float], b: Sequence[float], permutations: int = ..., seed: int = ...
) -> Dict[str, float]: ...
def fuse(
    runs: Sequence[Run],
    method: str = ...,
    depth: int = ...,
    weights: Optional[Sequence[float]] = ...,
    rrf_k: float = ...,
) -> Run: ...

class Encoder:
    def __init__(
        self, model: str, max_length: Optional[int] = ..., dimensions: Optional[int] = ...
    ) -> None: ...
    @property
    def dim(self) -> int: ...
    def encode(
        self, texts: Union[str, Sequence[str]], batch_size: int = ..., kind: str = ..., **_ignored: object
    ) -> npt.NDArray[np.float32]: ...
    def encode_queries(
        self, queries: Sequence[str], batch_size: int = ..., **kwargs: object
    ) -> npt.NDArray[np.float32]: ...
    def encode_corpus(
        self,
        corpus: Union[Sequence[str], Sequence[Dict[str, str]], Dict[str, Dict[str, str]]],
        batch_size: int = ...,
        **kwargs: object,
    ) -> npt.NDArray[np.float32]: ...

class MtebEncoder:
    encoder: Encoder
    batch_size: int
    def __init__(self, encoder: Union[Encoder, str], batch_size: int = ..., **kwargs: object) -> None: ...
    def encode(
        self,
        inputs: Union[str, Sequence[str], Iterable[Union[Dict[str, Sequence[str]], Sequence[str]]]],
        *,
        prompt_type: object = ...,
        batch_size: Optional[int] = ...,
        **_ignored: object,
    ) -> npt.NDArray[np.float32]: ...
    def similarity(self, a: npt.ArrayLike, b: npt.ArrayLike) -> npt.NDArray[np.float32]: ...
    def similarity_pairwise(self, a: npt.ArrayLike, b: npt.ArrayLike) -> npt.NDArray[np.float32]: ...

def build(
    config: Union[str, "os.PathLike[str]", Dict[str, object]],
    out: Union[str, "os.PathLike[str]"],
    logger: Optional[logging.Logger] = ...,
) -> Dict[str, object]: ...
def refresh(
    from_dir: Union[str, "os.PathLike[str]"],
    config: Union[str, "os.PathLike[str]", Dict[str, object]],
    out: Union[str, "os.PathLike[str]"],
    logger: Optional[logging.Logger] = ...,
) -> Dict[str, object]: ...
def logger_default() -> logging.Logger: ...

class Index:
    def __init__(self, path: str) -> None: ...
    @staticmethod
    def build(
        path: Union[str, "os.PathLike[str]"],
        corpus: Union[str, "os.PathLike[str]"],
        bm25: bool = ...,
        dense: Sequence[str] = ...,
        hnsw: bool = ...,
        vector_dtype: str = ...,
        logger: Optional[logging.Logger] = ...,
    ) -> "Index": ...
    def refresh(
        self,
        add: Optional[Union[str, "os.PathLike[str]"]] = ...,
        remove_repos: Sequence[str] = ...,
        logger: Optional[logging.Logger] = ...,
    ) -> "Index": ...
    def __len__(self) -> int: ...
    def search_vectors(
        self,
        vectors: npt.NDArray[np.float32],
        k: int = ...,
        model: str = ...,
        exact: bool = ...,
    ) -> Union[List[Tuple[str, float]], List[List[Tuple[str, float]]]]: ...
    def search(
        self, query: str, k: int = ..., retriever: str = ..., exact: bool = ...
    ) -> List[Tuple[str, float]]: ...
    def retrieve(
        self, queries: Dict[str, str], k: int = ..., retriever: str = ..., exact: bool = ...
    ) -> Run: ...

def load_dataset(
    queries: str, corpus: str, split: str = ..., corpus_split: str = ...
) -> Dict[str, dict]: ...

class DataLoader:
    def __init__(
        self, queries_repo: str = ..., corpus_repo: str = ..., topic: Optional[str] = ...
    ) -> None: ...
    def load(
        self, split: str = ...
    ) -> Tuple[Dict[str, Dict[str, str]], Dict[str, str], Dict[str, str]]: ...
    def load_qrels(
        self, split: str = ...
    ) -> Tuple[Qrels, Qrels, Dict[str, List[str]]]: ...
