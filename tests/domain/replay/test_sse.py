from __future__ import annotations

import json

import pytest

from evertune.domain.replay.sse import BadChunk, Chunk, SseDecoder, read_chunk

STREAM = (
    b": keep-alive comment\n"
    b'data: {"a": 1}\n\n'
    b"event: message\r\n"
    b"data:no-space\r\n\r\n"
    b"data: first line\n"
    b"data: second line\n\n"
    b"id: 7\rdata: cr only\r\r"
    b"data: [DONE]\n\n"
)
EVENTS = ['{"a": 1}', "no-space", "first line\nsecond line", "cr only", "[DONE]"]


def test_decoder_reads_whole_stream() -> None:
    decoder = SseDecoder()
    assert decoder.feed(STREAM) == EVENTS
    assert decoder.close() == []


@pytest.mark.parametrize("cut", range(1, len(STREAM)))
def test_decoder_same_events_whatever_the_split(cut: int) -> None:
    decoder = SseDecoder()
    events = decoder.feed(STREAM[:cut]) + decoder.feed(STREAM[cut:]) + decoder.close()
    assert events == EVENTS


def test_decoder_byte_by_byte() -> None:
    decoder = SseDecoder()
    events = [event for byte in STREAM for event in decoder.feed(bytes([byte]))]
    assert events + decoder.close() == EVENTS


def test_decoder_dispatches_unterminated_event_at_close() -> None:
    decoder = SseDecoder()
    assert decoder.feed(b"data: [DONE]") == []
    assert decoder.close() == ["[DONE]"]


def test_decoder_keeps_utf8_split_across_reads() -> None:
    payload = 'data: {"t": "é"}\n\n'.encode()
    cut = payload.index("é".encode()) + 1
    decoder = SseDecoder()
    assert decoder.feed(payload[:cut]) + decoder.feed(payload[cut:]) == ['{"t": "é"}']


def _chat(delta: dict[str, object]) -> str:
    return json.dumps({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]})


def test_role_only_chunk_is_not_content() -> None:
    assert read_chunk(_chat({"role": "assistant", "content": ""})) == Chunk()
    assert read_chunk(_chat({"role": "assistant"})) == Chunk()


def test_content_reasoning_and_completion_text_are_content() -> None:
    assert read_chunk(_chat({"content": "Hi"})).content
    assert read_chunk(_chat({"reasoning_content": "hmm"})).content
    assert read_chunk(_chat({"reasoning": "hmm"})).content
    assert read_chunk(json.dumps({"choices": [{"index": 0, "text": " the"}]})).content
    assert not read_chunk(json.dumps({"choices": [{"index": 0, "text": ""}]})).content


def test_usage_chunk_and_done() -> None:
    usage = json.dumps({"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 3}})
    assert read_chunk(usage) == Chunk(prompt_tokens=12, completion_tokens=3)
    assert read_chunk(json.dumps({"choices": [], "usage": None})) == Chunk()
    assert read_chunk("[DONE]") == Chunk(done=True)


def test_error_and_garbage() -> None:
    assert read_chunk(json.dumps({"error": {"message": "boom\nagain"}})).error == "boom again"
    with pytest.raises(BadChunk):
        read_chunk("{not json")
    with pytest.raises(BadChunk):
        read_chunk("[1, 2]")
