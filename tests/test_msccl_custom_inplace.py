"""In-place custom MSCCL programs (coll="custom" inplace="1"): their postcondition
is inferred as for out-of-place ones, with input and output aliased as the
verifier aliases them; they verify and simulate.

msccl-tools writes such files, e.g. its AllToNext forward program (each rank's
buffer goes to the next rank). The programs here are AllToNext-like: rank r
forwards its chunk to rank r + 1; the middle rank must send its own chunk before
it overwrites the shared buffer with the one it receives.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from simcoll.errors import AlgorithmError
from simcoll.interop import export_msccl_xml, parse_msccl_xml, parse_msccl_xml_all, read_msccl_xml_all
from simcoll.machines import load_machine
from simcoll.simulator import simulate
from simcoll.verify import check

SHARED_XML = Path("/work/shared/interop/msccl-xml")

_STEP = 'srcbuf="{sb}" srcoff="0" dstbuf="{db}" dstoff="0" cnt="1"'


def _all_to_next(*, out_chunks: int, recv_buf: str, dep: bool = True) -> str:
    """A 3-rank in-place AllToNext: 0 -> 1 -> 2, one chunk each.

    ``out_chunks``: o_chunks of every gpu (0 is msccl-tools' in-place form, all
    references to the input buffer); ``recv_buf``: the buffer receives write
    into; ``dep``: whether rank 1's receive waits for its own send.
    """
    r, s = recv_buf, "i"
    wait = 'depid="1" deps="0" hasdep="0"' if dep else 'depid="-1" deps="-1" hasdep="0"'
    sent = 'depid="-1" deps="-1" hasdep="1"' if dep else 'depid="-1" deps="-1" hasdep="0"'
    return f"""<algo name="alltonext_fwd" proto="Simple" nchannels="1" nchunksperloop="1" ngpus="3" coll="custom" inplace="1">
  <gpu id="0" i_chunks="1" o_chunks="{out_chunks}" s_chunks="0">
    <tb id="0" send="1" recv="-1" chan="0">
      <step s="0" type="s" {_STEP.format(sb=s, db=r)} depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
  <gpu id="1" i_chunks="1" o_chunks="{out_chunks}" s_chunks="0">
    <tb id="0" send="-1" recv="0" chan="0">
      <step s="0" type="r" {_STEP.format(sb=s, db=r)} {wait}/>
    </tb>
    <tb id="1" send="2" recv="-1" chan="0">
      <step s="0" type="s" {_STEP.format(sb=s, db=r)} {sent}/>
    </tb>
  </gpu>
  <gpu id="2" i_chunks="1" o_chunks="{out_chunks}" s_chunks="0">
    <tb id="0" send="-1" recv="1" chan="0">
      <step s="0" type="r" {_STEP.format(sb=s, db=r)} depid="-1" deps="-1" hasdep="0"/>
    </tb>
  </gpu>
</algo>
"""


@pytest.mark.parametrize(
    ("out_chunks", "recv_buf"),
    [(0, "i"), (1, "o")],
    ids=["msccl-tools-form-input-only", "both-buffers-aliased"],
)
def test_inplace_custom_postcondition_is_inferred(out_chunks, recv_buf):
    program = parse_msccl_xml(_all_to_next(out_chunks=out_chunks, recv_buf=recv_buf))
    coll = program.collective
    assert coll.inplace and not coll.combining
    # every rank starts with its own chunk; rank 1 ends with rank 0's, rank 2 with rank 1's,
    # rank 0 keeps its own (its buffer is never written)
    assert coll.input_layout == ((0,), (1,), (2,))
    assert coll.output_layout == ((0,), (0,), (1,))
    assert check(program) == []


def test_inplace_custom_simulates_and_round_trips():
    program = parse_msccl_xml(_all_to_next(out_chunks=0, recv_buf="i"))
    result = simulate(program, load_machine("ring:3"), 1 << 20)
    # one chunk, rank 0 -> 1 and rank 1 -> 2 in parallel: at least one 1 MB transfer over a 25 GB/s link
    assert result.time_s >= (1 << 20) / 25e9
    again = parse_msccl_xml(export_msccl_xml(program))
    assert again == program and 'inplace="1"' in export_msccl_xml(program)


def test_inplace_custom_without_the_ordering_dependency_is_not_verified():
    """Rank 1 receiving into the shared buffer before its own send has read it is
    a race: whichever postcondition the inference sees, the verifier refuses it."""
    program = parse_msccl_xml(_all_to_next(out_chunks=0, recv_buf="i", dep=False))
    assert check(program) != []


def test_out_of_place_reading_is_unchanged():
    """The same XML out of place: rank 0's output is never written, as before."""
    text = _all_to_next(out_chunks=1, recv_buf="o").replace('inplace="1"', 'inplace="0"')
    with pytest.raises(AlgorithmError, match=r"rank 0 output\[0\] never receives data"):
        parse_msccl_xml(text)


def test_inplace_rank_without_input_chunks_contributes_nothing():
    """Rank 2 only receives: with i_chunks="0" it starts with nothing and ends with rank 1's chunk."""
    text = _all_to_next(out_chunks=1, recv_buf="o").replace('<gpu id="2" i_chunks="1"', '<gpu id="2" i_chunks="0"')
    program = parse_msccl_xml(text)
    assert program.collective.input_layout == ((0,), (1,), ())
    assert program.collective.output_layout == ((0,), (0,), (1,))
    assert check(program) == []


def test_inplace_rank_whose_data_would_sit_in_its_output_is_refused():
    """An Allgather-like in-place form (i_chunks="0", own data inside the output):
    the XML does not say so, so the never-written slot is reported."""
    text = _all_to_next(out_chunks=2, recv_buf="o").replace('<gpu id="2" i_chunks="1"', '<gpu id="2" i_chunks="0"')
    with pytest.raises(AlgorithmError, match=r"rank 0 output\[1\] never receives data") as err:
        parse_msccl_xml(text)
    assert "\n" not in str(err.value)


@pytest.mark.skipif(not (SHARED_XML / "custom_collective.xml").exists(), reason="shared MSCCL XML files absent")
def test_real_custom_file_in_place_matches_out_of_place():
    """msccl-tools' custom_collective.xml read as written, and with inplace="1":
    the same postcondition, but that a rank with no output chunks (the sender)
    now ends holding its input (its output is its input buffer)."""
    text = (SHARED_XML / "custom_collective.xml").read_text()
    outs = read_msccl_xml_all(SHARED_XML / "custom_collective.xml")
    ins = parse_msccl_xml_all(text.replace('inplace="0"', 'inplace="1"'), "custom_collective.xml (in place)")
    machine = load_machine("ring:3")
    for out, inp in zip(outs, ins, strict=True):
        assert inp.collective.inplace and not out.collective.inplace
        for r, (got, was) in enumerate(zip(inp.collective.output_layout, out.collective.output_layout, strict=True)):
            assert got == (was or inp.collective.input_layout[r])
        assert check(inp) == []
        assert simulate(inp, machine, 1 << 20).time_s == pytest.approx(simulate(out, machine, 1 << 20).time_s)
