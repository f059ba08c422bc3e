from __future__ import annotations

from logdoctor.parse.serverargs import parse_server_args


def test_typed_fields_and_nested_values() -> None:
    d = parse_server_args("model_path='/m/x', tp_size=8, mem_fraction_static=0.88, disable_cuda_graph=False, "
                          "cuda_graph_bs=[1, 2, 4], lora_paths=None, json_model_override_args='{}', "
                          "lora=LoRARef(name='a, b', path=None), mode=<Mode.AUTO: 'auto'>, ratio=1e-3)")
    assert d["model_path"] == "/m/x" and d["tp_size"] == 8 and d["mem_fraction_static"] == 0.88
    assert d["disable_cuda_graph"] is False and d["cuda_graph_bs"] == [1, 2, 4] and d["lora_paths"] is None
    assert d["lora"] == "LoRARef(name='a, b', path=None)" and d["mode"] == "<Mode.AUTO: 'auto'>"
    assert d["ratio"] == 0.001 and d["json_model_override_args"] == "{}"


def test_a_cut_line_keeps_what_is_whole() -> None:
    d = parse_server_args("model_path='x', tp_size=8, mem_fraction_static=0.")
    assert d == {"model_path": "x", "tp_size": 8}
    assert parse_server_args("model_path='x', name='unterminated") == {"model_path": "x"}
    assert parse_server_args("") == {}
