"""Sampling seeds (webrl/policy/seeds.py): stable, in range, one per place a token is sampled."""
import itertools

from webrl.policy.seeds import SEED_BITS, derive_seed, sub_seed


def test_seeds_are_stable_in_range_and_tell_every_part_apart():
    # pinned: a seed derivation that changed between versions would make a resumed run of an
    # older run sample other tokens than the run it resumes
    assert derive_seed(0, "0:0:t", 0) == derive_seed(0, "0:0:t", 0) == 11374021
    seeds = {derive_seed(7, f"{it}:{i}:task", m, t)
             for it, i, m, t in itertools.product(range(3), range(4), range(8), range(5))}
    assert len(seeds) == 3 * 4 * 8 * 5  # no two (iteration, group, member, turn) share a seed
    assert all(0 <= s < 2 ** SEED_BITS for s in seeds)
    assert derive_seed(1, 2) != derive_seed(2, 1) and derive_seed(1, "2") != derive_seed(1, 2)
    assert derive_seed(1, "a") != derive_seed(2, "a")  # the run seed moves every seed


def test_sub_seeds_follow_the_seed_and_none_stays_unseeded():
    assert sub_seed(None, 3) is None
    assert sub_seed(5, 3) == derive_seed(5, 3) != sub_seed(5, 4)
    assert sub_seed(5, "refine") != sub_seed(5, "write")
