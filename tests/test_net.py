"""The broad net's decisions: when it runs, what counts as a clue, and how it words what it inferred."""
from __future__ import annotations

from pathlib import Path

from logdoctor.diagnosis.ranking import Report, diagnose_source
from logdoctor.diagnosis.holes import holes
from logdoctor.diagnosis.rules import load_ruleset

RULES = load_ruleset()
P2P_WARN = "sgl-worker-0:4167:5269 [0] transport/p2p.cc:275 NCCL WARN Cuda failure 'invalid argument'\n"


def _report(tmp_path: Path, text: str) -> Report:
    log = tmp_path / "case.log"
    log.write_text(text, encoding="utf-8")
    return diagnose_source(str(log), RULES)


def test_an_nccl_warn_from_the_p2p_transport_is_ipc(tmp_path: Path) -> None:
    r = _report(tmp_path, "[2025-05-01 10:00:00 TP0] Init torch distributed begin.\n" + P2P_WARN)
    assert r.verdict == "failed" and r.primary is not None and r.primary.category == "ipc_bar"
    assert r.primary.rule.id == "NET002" and r.primary.inferred["from"] == "vocabulary"
    assert "transport/p2p.cc:275" in r.primary.explanation or "p2p" in r.primary.inferred["term"]
    assert r.primary.evidence[0].line == 2 and r.primary.confidence < 0.6


def test_an_info_line_is_never_a_clue(tmp_path: Path) -> None:
    info = ("sgl-worker-0:4167:5269 [0] NCCL INFO NET/Plugin: Plugin load returned 2 : libnccl-net.so: cannot open "
            "shared object file: No such file or directory : when loading libnccl-net.so\n")
    r = _report(tmp_path, "[2025-05-01 10:00:00 TP0] Init torch distributed begin.\n" + info)
    assert r.verdict == "incomplete"
    assert r.primary is None or r.primary.inferred is None or r.primary.inferred["from"] == "stage"


def test_a_line_a_rule_explained_as_harmless_is_no_clue(tmp_path: Path) -> None:
    text = ("[2025-05-01 10:00:00 TP0] Init torch distributed begin.\n"
            "[2025-05-01 10:00:05 TP1] Setup Custom allreduce failed with CUDART error: peer access is not supported "
            "between these two devices. To silence this warning, specify --disable-custom-all-reduce explicitly.\n")
    r = _report(tmp_path, text)
    assert r.verdict == "incomplete"
    assert r.primary is None or r.primary.category != "ipc_bar" or r.primary.rule.stall


def test_a_warning_at_the_end_names_a_stall_not_a_failure(tmp_path: Path) -> None:
    text = ("[W socket.cpp:697] [c10d] The IPv6 network addresses of ( 10.0.5.4, 8004) cannot be retrieved "
            "(gai error: -2 - Name or service not known).\n")
    r = _report(tmp_path, text)
    assert r.verdict == "incomplete" and r.primary is not None
    assert r.primary.category == "communication" and not r.primary.rule.fatal
    assert "warning" in r.primary.explanation


def test_a_cut_traceback_is_placed_by_its_deepest_frame_even_when_that_frame_is_cut(tmp_path: Path) -> None:
    text = ("[2025-04-10 07:26:56 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
            '  File "/tmp/sglang/python/sglang/srt/managers/scheduler.py", line 1809, in run_scheduler_process\n'
            '    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, dp_rank)\n'
            '  File "/tmp/sglang/python/sglang/srt/model_loader/loader.py", line 366, in load_model\n'
            '    model = _initialize_model(\n'
            '  File "/tmp/sglang/python/sglang/srt/model_loader/loader.py", line 145, in _in\n')
    r = _report(tmp_path, text)
    assert r.verdict == "failed" and r.primary is not None and r.primary.category == "unsupported"
    assert r.primary.inferred["from"] == "frames"
    assert "cut off" in r.primary.explanation and "sglang/srt/model_loader/loader.py" in r.primary.explanation
    assert "loader.py:145" in r.primary.evidence[0].text


def test_a_model_forward_after_the_ready_line_is_not_graph_capture(tmp_path: Path) -> None:
    text = ("[2025-05-01 10:00:00] The server is fired up and ready to roll!\n"
            "[2025-05-01 10:05:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
            '  File "/sgl-workspace/sglang/python/sglang/srt/models/llama.py", line 300, in forward\n'
            "    hidden_states = self.model(input_ids, positions, forward_batch)\n")
    r = _report(tmp_path, text)
    assert r.primary is None or r.primary.category != "graph_incompatibility"


def test_a_stall_is_named_from_the_stage(tmp_path: Path) -> None:
    # no "Init torch distributed" lines: the stall rule of the weights stage (UNK005) needs them
    text = ("[2025-05-01 10:00:02 TP0] Load weight begin. avail mem=78.38 GB\n"
            "[2025-05-01 10:00:02 TP1] Load weight begin. avail mem=78.38 GB\n"
            "[2025-05-01 10:03:02 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=62.21 GB\n"
            "[2025-05-01 10:03:02 TP1] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=62.21 GB\n")
    r = _report(tmp_path, text)
    assert r.verdict == "incomplete" and r.primary is not None and r.primary.rule.stall
    assert r.primary.inferred == {"from": "stage", "weight": 20, "stage": "weights"}
    assert "KV cache" in r.primary.rule.title and "cut" in r.primary.explanation
    assert r.primary.evidence[0].line == 4


def test_an_error_looking_last_line_fails_the_launch_with_that_line(tmp_path: Path) -> None:
    text = ("[2025-05-01 10:00:00 TP0] Init torch distributed begin.\n"
            "[2025-05-01 10:00:09 TP0] ERROR launcher lost contact with the frobnicator\n")
    r = _report(tmp_path, text)
    assert r.verdict == "failed" and r.primary is not None and r.primary.category == "unknown"
    assert r.primary.inferred["from"] == "last_line" and r.primary.evidence[0].line == 2
    assert "frobnicator" in r.primary.explanation


def test_inferred_diagnoses_have_no_holes_and_say_they_were_inferred(tmp_path: Path) -> None:
    r = _report(tmp_path, "[2025-05-01 10:00:00 TP0] Init torch distributed begin.\n" + P2P_WARN)
    d = r.primary
    assert d is not None
    assert "inferred" in d.rule.title and "No rule names" in d.explanation and "generally" in d.explanation
    for text in [d.rule.title, d.explanation, *d.remedies]:
        assert holes(text) == [], text
    as_json = d.to_dict()
    assert as_json["rule"] == "NET002" and as_json["inferred"]["library"] == "nccl"
