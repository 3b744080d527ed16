"""Which blocks are cached and where: the ground index, the records in orbit, a prompt's lookup, saving a block.

  radix          the ground index of cached blocks: one SQLite file every process shares
  orbit_records  the index in orbit: each block's record on home satellites, so any ground host finds any block
  lookup         a prompt's cached prefix named, found and priced: one PrefixFinder for both engines
  result         what a lookup found, and what get_cache returns
  saving         saving blocks (stored, indexed, kept near) and noting a load's use: one path for both engines
  lost           the one rule for a block that failed to load: it and those after it leave store and index
"""
