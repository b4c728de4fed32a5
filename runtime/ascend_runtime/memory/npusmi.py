"""Parse captured ``npu-smi`` output into chips (HBM used / total) and device processes.

Three output kinds are read, detected from the text itself:

``npu-smi info``
    The summary table: two rows per chip, then a process section. The table is read by its
    ``|``-separated cells and header names, never by column offsets, because widths differ
    between versions and chips (910B: 96 columns, 910ProB: 93, 310P: 106) and some captures
    carry trailing spaces. Chip rows: the first row's first cell is ``NPU-ID Name``; the second
    row's first cell starts with the Chip column (followed by ``Device`` on 310P or ``Phy-ID`` on
    A3: the chip's physical device id, :attr:`ChipMemory.device_id`). Memory: the value in the ``HBM-Usage(MB)`` column, or on chips with
    no HBM column (310P) the single ``Memory-Usage(MB)`` (DDR) pair. Process rows: NPU, Chip,
    Process id, Process name (often blank in containers), Process memory(MB). PIDs are *host*
    PIDs, not the container's.

``npu-smi info -t usages -i N``
    Tab-indented ``key : value`` lines. It reports only ``HBM Capacity(MB)`` and an integer
    ``HBM Usage Rate(%)``, so chips get ``hbm_total_mb`` and ``hbm_usage_rate_pct`` and no
    ``hbm_used_mb`` (1 % of 64 GB is 655 MB: too coarse for leak detection).

``npu-smi info -t proc-mem -i N``
    ``Process id:207795  Process name:VLLMEngineCor  Process memory(MB):55436`` lines, or
    ``No process in device.``. No verbatim real sample of this command was found (see
    shared/reference/fixtures/SOURCES.md); this part is written from the documented line format
    and takes the NPU and chip from ``NPU ID`` / ``Chip ID`` lines when present (else null).

:func:`parse_npu_smi` is pure (text in, :class:`NpuSmiReport` out) and raises
:class:`NpuSmiParseError`, whose message says what was expected, for anything else.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any, Literal

__all__ = [
    "ChipMemory",
    "DeviceProcess",
    "NpuSmiParseError",
    "NpuSmiReport",
    "parse_npu_smi",
]

ReportKind = Literal["info", "usages", "proc-mem"]

_EXPECTED = (
    "expected the output of `npu-smi info` (a table with an `| NPU  Name | Health | ...` header), "
    "`npu-smi info -t usages -i N` (`HBM Capacity(MB) : ...` lines) or "
    "`npu-smi info -t proc-mem -i N` (`Process id:... Process memory(MB):...` lines)"
)


class NpuSmiParseError(ValueError):
    """Text that is not npu-smi output of a kind this parser reads; the message says why."""


@dataclass(frozen=True)
class ChipMemory:
    """One chip: ``npu`` is the NPU ID column, ``chip`` the Chip column.

    ``device_id`` is the physical device id printed beside the chip (``Phy-ID`` on A3, ``Device``
    on 310P), None where the table has no such column (910B: one chip per NPU ID, which is the id).
    """

    npu: int
    chip: int
    name: str | None = None
    hbm_used_mb: int | None = None
    hbm_total_mb: int | None = None
    hbm_usage_rate_pct: int | None = None
    device_id: int | None = None


@dataclass(frozen=True)
class DeviceProcess:
    """A process holding device memory. ``pid`` is a host PID; ``name`` is ``""`` when blank."""

    npu: int | None
    chip: int | None
    pid: int
    name: str
    memory_mb: int


@dataclass(frozen=True)
class NpuSmiReport:
    kind: ReportKind
    chips: tuple[ChipMemory, ...] = ()
    processes: tuple[DeviceProcess, ...] = ()
    version: str | None = None

    def device_ids(self) -> dict[tuple[int, int], int]:
        """(NPU, chip) -> the physical device id that ``ASCEND_VISIBLE_DEVICES`` names.

        The printed Phy-ID / Device column where there is one; else the NPU ID for NPUs with a
        single chip. A chip whose id cannot be told is left out.
        """

        per_npu = Counter(chip.npu for chip in self.chips)
        ids: dict[tuple[int, int], int] = {}
        for chip in self.chips:
            if chip.device_id is not None:
                ids[(chip.npu, chip.chip)] = chip.device_id
            elif per_npu[chip.npu] == 1:
                ids[(chip.npu, chip.chip)] = chip.npu
        return ids

    def restricted_to(self, devices: frozenset[int] | None) -> NpuSmiReport:
        """Only the chips with these physical device ids, and the processes on them (None: all).

        On a node shared by several pods ``npu-smi`` can list every chip and every pod's
        processes; a pod counts only its own.
        """

        if devices is None:
            return self
        ids = self.device_ids()
        chips = tuple(chip for chip in self.chips if ids.get((chip.npu, chip.chip)) in devices)
        kept = {(chip.npu, chip.chip) for chip in chips}
        processes = tuple(p for p in self.processes if (p.npu, p.chip) in kept)
        return replace(self, chips=chips, processes=processes)

    def to_json(self) -> dict[str, Any]:
        """The shape of the fixtures' ``.expected.json`` for this kind of output."""

        procs = [
            {"npu": p.npu, "chip": p.chip, "pid": p.pid, "name": p.name, "memory_mb": p.memory_mb}
            for p in self.processes
        ]
        if self.kind == "usages":
            return {
                "chips": [
                    {
                        "npu": c.npu,
                        "chip": c.chip,
                        "hbm_total_mb": c.hbm_total_mb,
                        "hbm_usage_rate_pct": c.hbm_usage_rate_pct,
                    }
                    for c in self.chips
                ]
            }
        if self.kind == "proc-mem":
            return {"processes": procs}
        return {
            "chips": [
                {"npu": c.npu, "chip": c.chip, "hbm_used_mb": c.hbm_used_mb, "hbm_total_mb": c.hbm_total_mb}
                for c in self.chips
            ],
            "processes": procs,
        }


def parse_npu_smi(text: str) -> NpuSmiReport:
    """Parse one capture of ``npu-smi info`` (table), ``-t usages`` or ``-t proc-mem``."""

    if not isinstance(text, str):
        raise NpuSmiParseError(f"{_EXPECTED}; got {type(text).__name__}, not text")
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    if any(_is_chip_header(_cells(line)) for line in lines if line.lstrip().startswith("|")):
        return _parse_table(lines)
    if any(_PROC_MEM_LINE.search(line) or _NO_PROC_MEM.search(line) for line in lines):
        return _parse_proc_mem(lines)
    if any(_KEY_VALUE.match(line) and _key(line) in _USAGE_CAPACITY_KEYS for line in lines):
        return _parse_usages(lines)
    if not text.strip():
        raise NpuSmiParseError(f"{_EXPECTED}; the input is empty")
    raise NpuSmiParseError(f"{_EXPECTED}; found none of them")


# --------------------------------------------------------------------------------------------
# `npu-smi info` table


def _cells(line: str) -> list[str]:
    """The ``|``-separated cells of a table line, stripped; [] for other lines."""

    stripped = line.strip()
    if not stripped.startswith("|"):
        return []
    parts = stripped.split("|")
    # "| a | b |" -> ["", " a ", " b ", ""]; a row without the closing bar keeps its last cell.
    inner = parts[1:-1] if stripped.endswith("|") and len(parts) > 2 else parts[1:]
    return [part.strip() for part in inner]


def _is_chip_header(cells: list[str]) -> bool:
    return len(cells) >= 3 and cells[0].split()[:1] == ["NPU"] and "Name" in cells[0] and "Health" in cells[1]


def _is_process_header(cells: list[str]) -> bool:
    return any(cell.lower().startswith("process id") for cell in cells)


_USAGE_PAIR = re.compile(r"(\d+)\s*/\s*(\d+)")
_INT = re.compile(r"^-?\d+$")
_NO_PROCESSES = re.compile(r"no running processes found", re.IGNORECASE)
_VERSION = re.compile(r"npu-smi\s+(\S+)")


def _column_values(header_cell: str, value_cell: str) -> dict[str, str]:
    """Map header names (``HBM-Usage(MB)``) to values (``59718/65536``) within one cell."""

    names = header_cell.split()
    values = re.sub(r"\s*/\s*", "/", value_cell).split()
    if len(names) != len(values):
        return {}
    return dict(zip(names, values, strict=True))


def _parse_usage(header_cell: str, value_cell: str, line_no: int) -> tuple[int, int]:
    """(used, total) MB from the HBM column, else from Memory-Usage (310P has DDR only)."""

    columns = _column_values(header_cell, value_cell)
    name = "HBM-Usage(MB)" if "HBM-Usage(MB)" in columns else "Memory-Usage(MB)"
    if name in columns:
        match = _USAGE_PAIR.fullmatch(columns[name])
        if not match:
            raise NpuSmiParseError(
                f"line {line_no}: expected `used / total` MB under {name}, got {columns[name]!r}"
            )
        return int(match.group(1)), int(match.group(2))
    # Header and values did not line up one-to-one (an "NA" split in two, a new column):
    # fall back to the documented rule, the last `used / total` pair of the chip's second row.
    pairs = _USAGE_PAIR.findall(value_cell)
    if not pairs:
        raise NpuSmiParseError(
            f"line {line_no}: expected a `used / total` memory pair (MB) under {header_cell!r}, "
            f"got {value_cell!r}"
        )
    used, total = pairs[-1]
    return int(used), int(total)


def _parse_table(lines: list[str]) -> NpuSmiReport:
    version: str | None = None
    chip_header: list[str] | None = None
    chips: list[ChipMemory] = []
    processes: list[DeviceProcess] = []
    process_columns: dict[str, int] | None = None
    pending: tuple[int, str, int] | None = None  # (npu, name, line_no) of a chip's first row
    section = "preamble"

    for line_no, line in enumerate(lines, start=1):
        cells = _cells(line)
        if not cells:
            continue
        if section == "preamble" and version is None:
            match = _VERSION.search(cells[0])
            if match:
                version = match.group(1)
        if _is_chip_header(cells):
            section = "chip-header"
            continue
        if section == "chip-header":
            if cells[0].split()[:1] == ["Chip"]:
                chip_header = cells
                section = "chips"
                continue
            raise NpuSmiParseError(
                f"line {line_no}: expected the second header row of the npu-smi table "
                f"(`| Chip | Bus-Id | AICore(%) ...`), got {line.strip()!r}"
            )
        if _is_process_header(cells):
            process_columns = _process_columns(cells, line_no)
            section = "processes"
            if pending is not None:
                raise NpuSmiParseError(
                    f"line {pending[2]}: chip row for NPU {pending[0]} has no second row "
                    "(Chip, Bus-Id, memory)"
                )
            continue
        if section == "chips":
            if _is_chip_header(cells) or chip_header is None:
                continue
            first = cells[0].split()
            # A chip's first row is "NPU-ID Name"; its second row holds only integers
            # ("Chip", "Chip Device" on 310P, "Chip Phy-ID" on A3).
            second_row = bool(first) and all(_INT.match(token) for token in first)
            if pending is None:
                if not first or not _INT.match(first[0]) or second_row:
                    raise NpuSmiParseError(
                        f"line {line_no}: expected a chip row starting with the NPU ID and name, "
                        f"got {line.strip()!r}"
                    )
                pending = (int(first[0]), " ".join(first[1:]), line_no)
                continue
            if not second_row or len(cells) < len(chip_header):
                raise NpuSmiParseError(
                    f"line {line_no}: expected the chip's second row "
                    "(`| Chip | Bus-Id | ... used / total |`) "
                    f"after NPU {pending[0]}, got {line.strip()!r}"
                )
            usage_index = len(chip_header) - 1
            used, total = _parse_usage(chip_header[usage_index], cells[usage_index], line_no)
            chips.append(
                ChipMemory(
                    npu=pending[0],
                    chip=int(first[0]),
                    name=pending[1] or None,
                    hbm_used_mb=used,
                    hbm_total_mb=total,
                    device_id=int(first[1]) if len(first) > 1 else None,
                )
            )
            pending = None
            continue
        if section == "processes" and process_columns is not None:
            if len(cells) == 1 and _NO_PROCESSES.search(cells[0]):
                continue
            processes.append(_process_row(cells, process_columns, line_no, line))

    if chip_header is None:
        raise NpuSmiParseError(f"{_EXPECTED}; the table header has no second row (`| Chip | Bus-Id | ...`)")
    if pending is not None:
        raise NpuSmiParseError(
            f"line {pending[2]}: chip row for NPU {pending[0]} has no second row (Chip, Bus-Id, memory)"
        )
    if not chips:
        raise NpuSmiParseError("found the npu-smi table header but no chip rows under it")
    return NpuSmiReport(kind="info", chips=tuple(chips), processes=tuple(processes), version=version)


def _process_columns(cells: list[str], line_no: int) -> dict[str, int]:
    """Cell indexes of the process section: ids (NPU and Chip), pid, name, memory."""

    lowered = [cell.lower() for cell in cells]
    try:
        pid = next(i for i, cell in enumerate(lowered) if cell.startswith("process id"))
        name = next(i for i, cell in enumerate(lowered) if cell.startswith("process name"))
        memory = next(i for i, cell in enumerate(lowered) if cell.startswith("process memory"))
    except StopIteration:
        raise NpuSmiParseError(
            f"line {line_no}: expected a process header with `Process id`, `Process name` and "
            f"`Process memory(MB)` columns, got {' | '.join(cells)!r}"
        ) from None
    if pid == 0:
        raise NpuSmiParseError(f"line {line_no}: expected NPU and Chip columns before `Process id`")
    return {"ids_end": pid, "pid": pid, "name": name, "memory": memory, "width": len(cells)}


def _process_row(cells: list[str], columns: dict[str, int], line_no: int, line: str) -> DeviceProcess:
    if len(cells) != columns["width"]:
        raise NpuSmiParseError(
            f"line {line_no}: expected a process row with {columns['width']} cells "
            f"(NPU Chip | Process id | Process name | Process memory(MB)), got {line.strip()!r}"
        )
    ids = " ".join(cells[: columns["ids_end"]]).split()
    pid, memory = cells[columns["pid"]], cells[columns["memory"]]
    if (
        len(ids) != 2
        or not all(_INT.match(part) for part in ids)
        or not pid.isdigit()
        or not memory.isdigit()
    ):
        raise NpuSmiParseError(
            f"line {line_no}: expected `NPU Chip | PID | name | memory MB` integers in a process row, "
            f"got {line.strip()!r}"
        )
    return DeviceProcess(
        npu=int(ids[0]), chip=int(ids[1]), pid=int(pid), name=cells[columns["name"]], memory_mb=int(memory)
    )


# --------------------------------------------------------------------------------------------
# `npu-smi info -t usages` and `-t proc-mem`

_KEY_VALUE = re.compile(r"^\s*([^:]+?)\s*:\s*(.*?)\s*$")
_USAGE_CAPACITY_KEYS = {"HBM Capacity(MB)", "DDR Capacity(MB)"}
_PROC_MEM_LINE = re.compile(
    r"Process id\s*:\s*(\d+)\s+Process name\s*:\s*(.*?)\s*Process memory\(MB\)\s*:\s*(\d+)", re.IGNORECASE
)
_NO_PROC_MEM = re.compile(r"^\s*No process in device\.?\s*$", re.IGNORECASE)


def _key(line: str) -> str:
    match = _KEY_VALUE.match(line)
    return match.group(1) if match else ""


def _int_value(key: str, value: str, line_no: int) -> int:
    if not _INT.match(value):
        raise NpuSmiParseError(f"line {line_no}: expected an integer for `{key}`, got {value!r}")
    return int(value)


def _parse_usages(lines: list[str]) -> NpuSmiReport:
    npu: int | None = None
    chip_id: int | None = None
    metrics: dict[str, int] = {}
    chips: list[ChipMemory] = []
    chip_id_leads: bool | None = None

    def emit(chip: int | None) -> None:
        # HBM when the chip has it; otherwise (310P) DDR goes into the hbm_* keys, as in `info`.
        total = metrics.get("HBM Capacity(MB)", metrics.get("DDR Capacity(MB)"))
        rate_key = "HBM Usage Rate(%)" if "HBM Capacity(MB)" in metrics else "DDR Usage Rate(%)"
        if npu is None:
            raise NpuSmiParseError("expected an `NPU ID : N` line before the usage values")
        chips.append(
            ChipMemory(
                npu=npu,
                chip=chip if chip is not None else 0,
                hbm_total_mb=total,
                hbm_usage_rate_pct=metrics.get(rate_key),
            )
        )
        metrics.clear()

    for line_no, line in enumerate(lines, start=1):
        match = _KEY_VALUE.match(line)
        if not match:
            continue
        key, value = match.group(1), match.group(2)
        if key == "NPU ID":
            npu = _int_value(key, value, line_no)
        elif key == "Chip ID":
            # `Chip ID` closes a chip's block in the real sample; where it comes before any
            # value instead, it names the block that follows. The first one decides.
            if chip_id_leads is None:
                chip_id_leads = not metrics
            if chip_id_leads:
                if metrics:
                    emit(chip_id)
                chip_id = _int_value(key, value, line_no)
            else:
                emit(_int_value(key, value, line_no))
        elif key in ("HBM Capacity(MB)", "HBM Usage Rate(%)", "DDR Capacity(MB)", "DDR Usage Rate(%)"):
            metrics[key] = _int_value(key, value, line_no)
    if metrics:
        emit(chip_id)
    return NpuSmiReport(kind="usages", chips=tuple(chips))


def _parse_proc_mem(lines: list[str]) -> NpuSmiReport:
    npu: int | None = None
    chip: int | None = None
    processes: list[DeviceProcess] = []
    for line_no, line in enumerate(lines, start=1):
        match = _PROC_MEM_LINE.search(line)
        if match:
            processes.append(
                DeviceProcess(
                    npu=npu,
                    chip=chip,
                    pid=int(match.group(1)),
                    name=match.group(2).strip(),
                    memory_mb=int(match.group(3)),
                )
            )
            continue
        kv = _KEY_VALUE.match(line)
        if kv and kv.group(1) == "NPU ID":
            npu = _int_value("NPU ID", kv.group(2), line_no)
        elif kv and kv.group(1) == "Chip ID":
            chip = _int_value("Chip ID", kv.group(2), line_no)
    return NpuSmiReport(kind="proc-mem", processes=tuple(processes))
