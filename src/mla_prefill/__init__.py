"""mla-prefill: a FlashInfer-Bench solution package for mla_paged_prefill_causal_h16_ckv512_kpe64_ps1."""

__version__ = "0.1.0"
