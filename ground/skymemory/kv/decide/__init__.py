"""Fetch or recompute: this device's rates, the link's, and the decision per request.

  costmodel    predicted time to first token of each choice
  calibration  this device's compute and rebuild rates, measured once and kept on disk
  policy       the per-request decision, from those rates and the store's measured link
  throughput   KV bytes a prefix fetches against its prefill time: the break-even link rate Φkv
  disaggregation  prefill at one site, decode at another: the throughput model, t and N_p/N_d (seed 003)
"""
