from traceml_exporter_sdk import RECORD_TYPES


def test_seven_record_types() -> None:
    assert len(RECORD_TYPES) == 7
