"""A block's bytes: what each layer kind keeps, how it is encoded, and how landed bytes become a cache again.

  codec        a dense model's block <-> bytes (layer-major, fp16 / int8, CRC32C)
  groups       what a model's cache keeps, layer by layer: full, sliding-window and recurrent groups
  group_codec  a grouped model's block <-> bytes (K/V of every attention layer; the state in a prompt's last block)
  rebuild      landed bytes of a dense prefix -> its K and V per layer on the model's device
"""
