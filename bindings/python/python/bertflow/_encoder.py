"""The sentence encoder."""

import json
import os
import sys

from . import _bertflow


def defaults():
    """Every default bertflow uses when an argument is left out (a dict): the
    model, pooling, precision, weighting, batch size, the seed of fit samples,
    the STS data folder and the environment variables read. They are core's
    (the same for the CLI, Python, the server and Spark), resolved now."""
    import json

    return json.loads(_bertflow.defaults())


DEFAULT_MODEL = defaults()["model"]

#: Every named pooling with the hidden states it reads: (name, description).
POOLINGS = tuple(_bertflow.poolings())


def poolings():
    """The named poolings, as a list of ``(name, description)`` pairs.

    ``layers:i,j,...`` stands for any set of hidden states (0 = the embedding
    output, N = the last transformer layer).
    """
    return list(POOLINGS)


class _StderrProgress:
    """Prints ``encoding: done/total sentences`` on one stderr line."""

    def __init__(self):
        self.last = -1

    def __call__(self, done, total):
        pct = 100 * done // max(total, 1)
        if pct != self.last:
            self.last = pct
            end = "\n" if done >= total else ""
            sys.stderr.write(f"\rencoding: {done}/{total} sentences ({pct}%){end}")
            sys.stderr.flush()


def _fill_doc(doc):
    pools = "\n".join(f"            ``{name!r}``: {what}" for name, what in POOLINGS)
    types = ", ".join(f"``{t}``" for t in _bertflow.model_types())
    d = json.loads(_bertflow.defaults())  # core's defaults, not restated here
    return (doc.replace("{poolings}", pools).replace("{model_types}", types)
            .replace("{model_dir}", d["model_dir"]).replace("{pooling}", d["pooling"]))


class Encoder:
    """A frozen BERT model and one pooling: sentences in, float32 vectors out.

    Loading takes about a second; create one Encoder per process and reuse it.
    Encoding runs on ``threads`` worker threads with the GIL released, so other
    Python threads keep running.

    Args:
        model: A directory in Hugging Face layout (``config.json``,
            ``model.safetensors`` or ``pytorch_model.bin``, ``tokenizer.json``
            or ``vocab.txt``), a sentence-transformers directory, or a hub id
            (e.g. ``"bert-base-uncased"``) found in the local Hugging Face cache
            (nothing is downloaded). Default: ``$BERTFLOW_MODEL``, else
            ``{model_dir}`` in the working directory or in the
            checkout the package was installed from. config.json's
            ``model_type`` is one of: {model_types}.
        pooling: How token vectors become one sentence vector:
{poolings}
            Default: the calibrator's pooling; else ``"st"`` for a
            sentence-transformers directory whose modules change the vectors
            (a Dense or bertflow's calibrator: an exported directory); else
            ``"{pooling}"``.
        max_len: Truncate sentences at this many tokens, [CLS] and [SEP]
            included. Default: the model's position limit (512 for BERT).
        threads: Worker threads, each running whole batches on one core.
            Default: ``$BERTFLOW_THREADS``, else the number of cores.
        cache: Cache encoded matrices on disk, keyed by the model, pooling,
            max_len and the exact list of sentences (shared with the
            ``bertflow`` command): ``True`` for the default folder
            (``$BERTFLOW_CACHE``, else ``$XDG_CACHE_HOME/bertflow``, else
            ``~/.cache/bertflow``), a path for another folder, ``False`` for
            none.

        precision: ``"fp32"`` or ``"int8"`` (linear layers with s8
            weights per output channel and dynamically quantised activations;
            mean cosine to fp32 >= 0.99). Default: ``$BERTFLOW_PRECISION``,
            else ``"fp32"``.
        weighting: Token weighting of the averaging poolings: ``"mean"``
            (default), ``"sif"``, ``"usif"``, with options as in the CLI
            (``"sif:a=1e-4"``, ``"usif:punct=keep"``). ``sif``/``usif`` need
            word-piece frequencies: ``freq_file``, or :meth:`fit_weighting` on
            a corpus, or :meth:`use_weights_of` a calibrator fitted with them.
        freq_file: ``piece<TAB>count`` lines (as the CLI's ``--freq-file``).
        calibrator: A calibrator file (from ``bertflow fit`` or
            ``Calibrator.save``) or a fitted :class:`bertflow.Calibrator`,
            applied to every vector. It is checked as the CLI's
            ``--calibrator``: fitted on this model, pooling and dimension, and
            it brings its token weighting (another ``weighting`` is refused).
        allow_mismatch: Use a calibrator fitted on another model or pooling
            (never another dimension).

    Raises:
        FileNotFoundError: the model directory or one of its files is missing.
        ValueError: unknown pooling, a max_len the model does not allow,
            ``threads < 1``, or an unsupported checkpoint.

    An Encoder pickles as its arguments (the model is loaded again on
    unpickling), so it can be shipped to worker processes.
    """

    def __init__(self, model=None, pooling=None, max_len=None, threads=None, cache=True,
                 precision=None, weighting=None, freq_file=None, calibrator=None,
                 allow_mismatch=False):
        # Every default (None) is core's: bertflow.defaults() shows them. Only
        # Python types are checked here; values, ranges and the environment
        # ($BERTFLOW_MODEL, $BERTFLOW_THREADS) are core's business.
        if model is not None:
            model = os.fspath(model)
        for name, v in (("pooling", pooling), ("precision", precision),
                        ("weighting", weighting)):
            if v is not None and not isinstance(v, str):
                raise TypeError(f"{name} must be a str or None, not {type(v).__name__}")
        for name, v in (("max_len", max_len), ("threads", threads)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
                raise TypeError(f"{name} must be an int or None, not {type(v).__name__}")
            if v is not None and v < 0:
                raise ValueError(f"{name} must be at least 1, got {v}")
        if cache is True:
            cache_dir = _bertflow.default_cache_dir()
        elif cache is False or cache is None:
            cache_dir = None
        else:
            cache_dir = os.fspath(cache)
        if freq_file is not None:
            freq_file = os.fspath(freq_file)
        inner_cal = calibrator
        if calibrator is not None:
            if hasattr(calibrator, "_fitted"):
                inner_cal = calibrator._fitted()
            elif isinstance(calibrator, (str, bytes, os.PathLike)):
                inner_cal = os.fspath(calibrator)
            else:
                raise TypeError("calibrator must be a path or a bertflow Calibrator, not "
                                f"{type(calibrator).__name__}")
        self._args = (model, pooling, max_len, threads, cache, precision, weighting, freq_file,
                      calibrator, allow_mismatch)
        self._inner = _bertflow.Encoder(model, pooling, max_len, threads, cache_dir,
                                        precision, weighting, freq_file, inner_cal,
                                        bool(allow_mismatch))

    def fit_weighting(self, corpus):
        """Counts the weighting's word-piece frequencies on ``corpus`` (a list
        of str, typically the sentences a calibrator is fitted on) and returns
        the encoder. A no-op for ``weighting="mean"``."""
        self._inner.fit_weighting(corpus)
        return self

    def use_weights_of(self, calibrator):
        """Takes the token weights recorded in ``calibrator`` (fitted by the
        CLI with ``--weighting``, or in Python with ``source=`` an Encoder with
        a weighting), so vectors match the ones it was fitted on. Raises
        ValueError when its weighting is not this encoder's."""
        self._inner.use_weights_of(calibrator._fitted())
        return self

    @property
    def weighting(self):
        """The token weighting (``"mean"``, or the full spec)."""
        return self._inner.weighting

    @property
    def precision(self):
        """``"fp32"`` or ``"int8"``."""
        return self._inner.precision

    def encode(self, texts, batch_size=None, progress=False, normalize=False,
               prompt_name=None, prompt=None):
        """Embeds sentences.

        Args:
            texts: A list (or any iterable) of str; a single str is refused.
            batch_size: Sentences per forward pass (sentences of equal token
                length are batched together, so a sentence's vector does not
                depend on the batch it lands in).
                Default: ``bertflow.defaults()["batch_size"]``.
            progress: ``True`` prints progress on stderr; a callable is called
                as ``progress(done, total)``.
            normalize: Scale every row to unit length (after the calibrator), so
                a dot product is the cosine.
            prompt_name: A prompt of the model (a key of :attr:`prompts`, from
                the sentence-transformers directory's
                ``config_sentence_transformers.json``) put before every text.
            prompt: A text put before every text (``""``: no prompt at all).
                Neither: the model's ``default_prompt_name``, if any
                (:attr:`default_prompt`), as sentence-transformers does.

        Returns:
            numpy.ndarray: float32, shape ``(len(texts), dimension)``, rows in
            input order.

        Raises:
            TypeError: ``texts`` is a str or holds a non-str item.
            ValueError: ``texts`` is empty, ``batch_size < 1``, a
                ``prompt_name`` the model does not define (the message names
                the ones it does), both ``prompt_name`` and ``prompt``, or a
                prompt other than the calibrator's.
        """
        return self._encode(self._inner.encode, texts, batch_size, progress, normalize,
                            prompt_name, prompt)

    def encode_query(self, texts, batch_size=None, progress=False, normalize=False,
                     prompt_name=None, prompt=None):
        """:meth:`encode` of search queries: with the model's ``query`` prompt
        unless ``prompt_name`` or ``prompt`` is given (sentence-transformers'
        ``encode_query``); a model without one gets its default prompt."""
        return self._encode(self._inner.encode_query, texts, batch_size, progress, normalize,
                            prompt_name, prompt)

    def encode_document(self, texts, batch_size=None, progress=False, normalize=False,
                        prompt_name=None, prompt=None):
        """:meth:`encode` of documents to search: with the model's
        ``document`` prompt (else ``passage``, else ``corpus``) unless
        ``prompt_name`` or ``prompt`` is given (sentence-transformers'
        ``encode_document``); a model without one gets its default prompt."""
        return self._encode(self._inner.encode_document, texts, batch_size, progress,
                            normalize, prompt_name, prompt)

    def _encode(self, run, texts, batch_size, progress, normalize, prompt_name, prompt):
        if batch_size is not None and (isinstance(batch_size, bool)
                                       or not isinstance(batch_size, int)):
            raise TypeError(f"batch_size must be an int, not {type(batch_size).__name__}")
        if batch_size is not None and batch_size < 0:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        for name, v in (("prompt_name", prompt_name), ("prompt", prompt)):
            if v is not None and not isinstance(v, str):
                raise TypeError(f"{name} must be a str or None, not {type(v).__name__}")
        if progress is True:
            cb = _StderrProgress()
        elif progress is False or progress is None:
            cb = None
        elif callable(progress):
            cb = progress
        else:
            raise TypeError("progress must be a bool or a callable(done, total)")
        return run(texts, batch_size, cb, bool(normalize), prompt_name, prompt)

    @property
    def prompts(self):
        """The model's prompts, ``{name: text}`` (empty for a model without
        ``config_sentence_transformers.json``)."""
        return dict(self._inner.prompts)

    @property
    def default_prompt(self):
        """The text :meth:`encode` puts before every text when no prompt is
        given (the model's ``default_prompt_name``), or None."""
        return self._inner.default_prompt

    __call__ = encode

    @property
    def dimension(self):
        """Width of the vectors :meth:`encode` returns: the calibrator's output
        dimension when the Encoder has one (64 for ``pca:k=64``), else the
        pooling's (the model's hidden size, or the output of a
        sentence-transformers ``Dense`` module with ``pooling="st"``)."""
        return self._inner.dimension

    @property
    def pooling(self):
        """Canonical name of the pooling."""
        return self._inner.pooling

    @property
    def model(self):
        """The model as given (directory or hub id)."""
        return self._inner.model_id

    @property
    def fingerprint(self):
        """Short hash of the model files: equal fingerprints give equal vectors."""
        return self._inner.fingerprint

    @property
    def identity(self):
        """The model identity recorded in calibrator files (``name@fingerprint``)."""
        return self._inner.identity

    @property
    def max_len(self):
        """Token limit per sentence, [CLS] and [SEP] included."""
        return self._inner.max_len

    @property
    def threads(self):
        """Worker threads."""
        return self._inner.threads

    @property
    def num_layers(self):
        """Number of transformer layers."""
        return self._inner.num_layers

    @property
    def cache_dir(self):
        """The embedding cache folder, or None when the cache is off."""
        return self._inner.cache_dir

    def __reduce__(self):
        return (Encoder, self._args)

    def __repr__(self):
        return (
            f"Encoder(model={self.model!r}, pooling={self.pooling!r}, "
            f"max_len={self.max_len}, threads={self.threads}, precision={self.precision!r}, "
            f"weighting={self.weighting!r}, dimension={self.dimension})"
        )


Encoder.__doc__ = _fill_doc(Encoder.__doc__)
