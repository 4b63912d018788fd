#!/usr/bin/env python3
"""seeds.py - writes the seed corpora of the fuzz targets, tests/fuzz/corpus/<target>/.

The seeds are the test suite's own good and bad inputs (string literals of
tests/unit/*.c, tests/data/, the example and demo definitions) and a set in
the manner of JSONTestSuite written for Steward: edge numbers, surrogates,
byte order marks, duplicate keys, deep nesting, bad UTF-8. Each file is
named after the SHA-1 of its contents, as libFuzzer names what it finds,
so running this again adds nothing twice. Files found by fuzzing (crashes
kept as regression inputs) live beside the seeds and are never removed.

    tests/fuzz/seeds.py            # from the repository root
"""
import glob
import hashlib
import os
import re
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")
MAX_SEED = 16 * 1024  # bytes; larger inputs only slow the regression run


def c_strings(path):
    """The string literals of a C file, adjacent ones joined, escapes decoded."""
    text = open(path, encoding="utf-8", errors="surrogateescape").read()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    out, i, n = [], 0, len(text)
    pending = None
    while i < n:
        c = text[i]
        if c == "'":  # a character literal
            j = text.index("'", i + 1 + (text[i + 1] == "\\"))
            i = j + 1
            continue
        if c == '"':
            buf = bytearray()
            i += 1
            while text[i] != '"':
                if text[i] == "\\":
                    e = text[i + 1]
                    if e == "x":
                        m = re.match(r"[0-9a-fA-F]+", text[i + 2:])
                        buf.append(int(m.group(0), 16) & 0xFF)
                        i += 2 + len(m.group(0))
                        continue
                    if e in "01234567":
                        m = re.match(r"[0-7]{1,3}", text[i + 1:])
                        buf.append(int(m.group(0), 8) & 0xFF)
                        i += 1 + len(m.group(0))
                        continue
                    buf += {"n": b"\n", "t": b"\t", "r": b"\r", "0": b"\0"}.get(
                        e, e.encode("utf-8", "surrogateescape"))
                    i += 2
                    continue
                buf += text[i].encode("utf-8", "surrogateescape")
                i += 1
            i += 1
            pending = (pending or b"") + bytes(buf)
            continue
        if not c.isspace() and pending is not None:
            out.append(pending)
            pending = None
        i += 1
    if pending is not None:
        out.append(pending)
    return out


def files(pattern):
    paths = sorted(glob.glob(os.path.join(ROOT, pattern)))
    return [open(p, "rb").read() for p in paths if os.path.isfile(p)]


def literals(pattern):
    out = []
    for p in sorted(glob.glob(os.path.join(ROOT, pattern))):
        out += c_strings(p)
    return out


# ---- JSONTestSuite in Steward's terms --------------------------------------

NUMBERS = [b"0", b"-0", b"1", b"-1", b"1.5", b"1e400", b"-1e400", b"1e-400", b"1E+2",
           b"9223372036854775807", b"9223372036854775808", b"-9223372036854775808",
           b"-9223372036854775809", b"18446744073709551616", b"123456789012345678901234567890",
           b"253402300799999", b"253402300800000", b"-62135596800000", b"-62135596800001",
           b"0.0000001", b"1.7976931348623157e308", b"01", b"-", b"1.", b".5", b"NaN",
           b"Infinity", b"0x10", b"1e", b"+1"]

STRINGS = [b'"\\ud800"', b'"\\udc00\\ud800"', b'"\\ud83d\\ude00"', b'"\\u0000"', b'"\xed\xa0\x80"',
           b'"\xc0\x80"', b'"\xf5\x80\x80\x80"', b'"\xf4\x90\x80\x80"', b'"\xe2\x82"', b'"\x80"',
           b'"\x1b[31mred"', b'"\xc2\x9b2J"', b'"a\\/b"', b'"~0~1"', b'"\t"', b'"\\uDFFF"',
           b'"\\u00e9"', b'"\xef\xbb\xbf"', b'""', b'"' + b"k" * 1024 + b'"',
           b'"' + b"k" * 1025 + b'"', b'"' + "é".encode() * 512 + b'"']


def json_suite():
    docs = [b"{}", b"[]", b"null", b"\xef\xbb\xbf{}", b"\xef\xbb\xbf{\"a\":1}", b"{\"a\":1,\"a\":2}",
            b"{\"a\":1,}", b"{\"a\" 1}", b"{'a':1}", b"{\"a\":1}x", b"{\"a\":1}{}", b"{\"a\":",
            b"{\"a\":\"\x00\"}", b" \n\t{ } ", b"{\"\":1}", b"[1,2", b"\"top\"", b"42", b"true",
            b"{\"a\":[1,{\"b\":null}]}", b"{\"__proto__\":{}}"]
    for n in NUMBERS:
        docs.append(b'{"n":' + n + b"}")
    for s in STRINGS:
        docs.append(b'{"s":' + s + b"}")
        docs.append(b"{" + s + b":1}")
    for depth in (63, 64, 65, 200):
        docs.append(b'{"a":' * depth + b"1" + b"}" * depth)
        docs.append(b"{\"a\":" + b"[" * depth + b"]" * depth + b"}")
    docs.append(b'{"s":"' + b"[" * 100 + b'"}')  # brackets inside a string do not nest
    docs.append(b'{"s":"\\"' + b"{" * 100 + b'"}')
    return docs


# ---- per target --------------------------------------------------------------

ORDER = lambda **kw: ("{" + ",".join('"%s":%s' % (k, v) for k, v in kw.items()) + "}").encode()


def message_record(value, topic=0, key=None, headers=(), ts=1764500000000, tombstone=False,
                   no_ts=False):
    """One record of fuzz_message's input (see fuzz_message.c)."""
    ctl = topic & 3
    ctl |= 4 if key is not None else 0
    ctl |= 8 if tombstone else 0
    ctl |= (len(headers) & 7) << 4
    ctl |= 0x80 if no_ts else 0
    out = bytes([ctl]) + struct.pack("<q", ts) + (key or b"")
    for name, val in headers:
        out += b"\xff" + name + b"\xff" + val
    return out + b"\xff" + value


def message_seeds():
    seeds = []
    q = lambda s: '"%s"' % s
    T = '"2026-11-30T10:00:00Z"'
    flow = [
        (0, ORDER(type=q("OrderPlaced"), order_id=q("O-1"), id=q("e1"), time=T, total="12.5",
                  items='[{"sku":"A"}]')),
        (1, ORDER(type=q("PaymentCaptured"), payment='{"order_id":"O-1","id":"P-1"}', id=q("e2"),
                  time='"2026-11-30T10:05:00Z"')),
        (2, ORDER(type=q("StockReserved"), order_id=q("O-1"), id=q("e3"),
                  time='"2026-11-30T12:00:00.250+01:00"')),
        (3, ORDER(type=q("ShipmentDispatched"), order_id=q("O-1"), id=q("e4"), carrier=q("DHL"),
                  time='"2026-12-03T10:00:00Z"')),
    ]
    sep = b"\n\xfe\n"
    seeds.append(sep.join(message_record(v, t) for t, v in flow))
    seeds.append(sep.join(message_record(v, t) for t, v in reversed(flow)))  # parked, replayed
    seeds.append(sep.join(message_record(v, t) for t, v in flow[:1] * 2))  # duplicate
    for t, v in flow:
        seeds.append(message_record(v, t))
    # times at and past the edges, as text and epoch ms
    for tm in ['"0001-01-01T00:00:00Z"', '"9999-12-31T23:59:59.999Z"', '"0000-01-01T00:00:00Z"',
               '"9999-12-31T23:59:59.999-23:59"', '"2026-02-31T00:00:00Z"', "253402300799999",
               "253402300800000", "-62135596800000", "9223372036854775807",
               "-9223372036854775808", "1.5", '"yesterday"', "null"]:
        seeds.append(message_record(ORDER(type=q("OrderPlaced"), order_id=q("O"), time=tm)))
    for ts in (0x7FFFFFFFFFFFFFFF, -0x8000000000000000, -2, 253402300800000):
        seeds.append(message_record(ORDER(type=q("OrderPlaced"), order_id=q("O"), id=q("x")), ts=ts))
    seeds.append(message_record(ORDER(type=q("OrderPlaced"), order_id=q("O")), no_ts=True))
    # keys and ids at their limits
    for n in (1024, 1025):
        seeds.append(message_record(ORDER(type=q("OrderPlaced"), order_id=q("k" * n), id=q("i" * n))))
    seeds.append(message_record(ORDER(type=q("OrderPlaced"), order_id="17", id="42")))
    seeds.append(message_record(ORDER(type=q("OrderPlaced"), order_id='""')))
    # CloudEvents: binary (headers) and structured
    ce = [(b"ce_specversion", b"1.0"), (b"ce_type", b"OrderPlaced"), (b"ce_id", b"1"),
          (b"ce_source", b"/shop"), (b"ce_time", b"2026-11-30T10:00:00Z")]
    seeds.append(message_record(ORDER(order_id=q("O-9")), key=b"O-9", headers=ce))
    seeds.append(message_record(ORDER(order_id=q("O-9")), headers=ce[:2] + [(b"ce_id", b"\xff\x00")]))
    seeds.append(message_record(ORDER(order_id=q("O-9")),
                                headers=ce[:2] + [(b"ce_source", b"s" * 1025)] + ce[2:3]))
    seeds.append(message_record(ORDER(order_id=q("O-9")), headers=[(b"ce_specversion", b"0.3")]))
    seeds.append(message_record(
        ORDER(specversion=q("1.0"), type=q("OrderPlaced"), id=q("c1"), source=q("/s"),
              time='"2026-11-30T10:00:00Z"', data='{"order_id":"O-7"}'),
        headers=[(b"content-type", b"application/cloudevents+json; charset=utf-8")]))
    seeds.append(message_record(b"", tombstone=True))
    # the other mapping rules (fuzz_message's other definitions): a type in a
    # header, the Kafka message key, epoch seconds; a type fixed by the
    # topic and the Kafka timestamp; epoch milliseconds at a pointer
    refund = [(0, ORDER(id=q("r1"), at="1795946400", amount="5"), b"O-1",
               [(b"event-type", b"RefundRequested")]),
              (1, ORDER(id=q("r2"), at="1795946460", refund='{"order_id":"O-1"}'), b"O-1",
               [(b"Event-Type", b"RefundIssued")])]
    seeds.append(sep.join(message_record(v, t, key=k, headers=h) for t, v, k, h in refund))
    for at in ("253402300799", "253402300800", "-62135596800", "-62135596801",
               "9223372036854775807", '"1795946400"', "1.5"):
        seeds.append(message_record(ORDER(id=q("r"), at=at), 0, key=b"O-1",
                                    headers=[(b"event-type", b"RefundRequested")]))
    seeds.append(message_record(ORDER(id=q("r")), 0, key=b"\xc3",
                                headers=[(b"event-type", b"RefundRequested")]))
    seeds.append(message_record(ORDER(id=q("r")), 0, key=b"O\x00-1",
                                headers=[(b"event-type", b"\xff")]))
    seeds.append(sep.join([message_record(ORDER(sku=q("A-1"), kind=q("anything")), 2),
                           message_record(ORDER(sku=q("A-1"), kind=q("StockShipped")), 3)]))
    seeds.append(message_record(ORDER(sku="7"), 2, no_ts=True))
    seeds.append(sep.join([
        message_record(ORDER(type=q("PaymentCaptured"), order_id=q("O-2"), id=q("p1"),
                             ts="1795946400000"), 1),
        message_record(ORDER(type=q("PaymentSettled"), id=q("p2"), ts="1795946500000"), 1,
                       key=b"O-2")]))
    for ts in ("253402300800000", '"2026-11-30T10:00:00Z"', "-1"):
        seeds.append(message_record(ORDER(type=q("PaymentCaptured"), order_id=q("O-3"), ts=ts), 1))
    for v in literals("tests/unit/test_decode.c") + literals("tests/unit/test_engine.c"):
        if v.startswith(b"{"):
            seeds.append(message_record(v))
    for v in json_suite():
        seeds.append(message_record(v))
    return seeds


def definition_seeds():
    seeds = files("definitions/examples/*.json") + files("definitions/demo/*.json")
    seeds += files("tests/data/definitions/*") + files("tests/data/definitions/*/*")
    seeds += [s for s in literals("tests/unit/test_def.c") if s.lstrip().startswith(b"{")]
    seeds += json_suite()
    return seeds


def config_seeds():
    seeds = [s for s in literals("tests/unit/test_config.c") if s.lstrip().startswith((b"{", b"["))]
    seeds += [b"{" + s + b"}" for s in literals("tests/unit/test_config.c")
              if s.startswith(b'"') and b":" in s]
    seeds += [b'{"brokers":"k:9092","database":"host=db","definitions":"defs","group":"g",'
              b'"log_level":"debug","intake":{"batch_size":500,"batch_ms":"50ms",'
              b'"record_unknown":true,"dead_letter_topic":"dlq"},"scheduler":{"interval":"1s",'
              b'"grace":"30s"},"notifier":{"max_retry_after":"1d","group_window":"1m"},'
              b'"http":{"listen":"[::1]:9464"},"retention":{"history":"off","interval":"1h"},'
              b'"kafka":{"security.protocol":"plaintext"},'
              b'"routes":{"default":[{"type":"log"},{"type":"webhook","url":"http://x/"},'
              b'{"type":"pagerduty","routing_key":"r"},{"type":"alertmanager","url":"http://a/"}]}}',
              b'{"routes":{"default":[{"type":"pagerduty","routing_key_file":"nonexistent"}]}}',
              b'{"intake":{"max_message_bytes":9223372036854775807}}',
              b'{"notifier":{"max_retry_after":"106751991167d"}}']
    seeds += json_suite()
    return seeds


def duration_seeds():
    seeds = [s for s in literals("tests/unit/test_duration.c") if 0 < len(s) < 40 and b"%" not in s]
    seeds += [b"106751991167d7h12m55s807ms", b"106751991167d7h12m55s808ms", b"9223372036854775807ms",
              b"9223372036854775808ms", b"36525d", b"36526d", b"1h1h", b"1m1h", b"0", b"1 h",
              b"-1s", b"1.5h", b"1\xc2\xb5s", b"\xff"]
    return seeds


def time_seeds():
    seeds = [s for s in literals("tests/unit/test_decode.c") if re.match(rb"^\d{4}-", s)]
    seeds += [b"2026-11-29T21:06:03.250+01:00", b"2026-11-29t21:06:03z", b"2026-11-29 21:06:03Z",
              b"0001-01-01T00:00:00Z", b"0000-01-01T00:00:00Z", b"9999-12-31T23:59:59.999Z",
              b"9999-12-31T23:59:60.999-23:59", b"0001-01-01T00:00:00+23:59",
              b"2026-02-31T00:00:00Z", b"2026-11-29T21:06:03.1234567890123456789Z",
              b"2026-11-29T21:06:03.Z", b"2026-11-29T24:00:00Z", b"2026-11-29T21:06:03+0100",
              b"2026-11-29T21:06:03"]
    return seeds


def jsonptr_seeds():
    seeds = []
    doc = b'{"a":{"b":[1,"x"]},"m/n":1,"~":2,"":{"":3},"items":[{"sku":"A"}]}'
    for p in [b"", b"/", b"/a", b"/a/b/0", b"/a/b/1", b"/a/b/2", b"/a/b/-", b"/a/b/01", b"/m~1n",
              b"/~0", b"/~2", b"/~", b"a", b"//", b"/items/0/sku", b"/a/b/99999999999999999999",
              b"/a/b/-1", b"/\xc3\xa9", b"/\xff"]:
        seeds.append(p + b"\n" + doc)
    seeds += [s for s in literals("tests/unit/test_jsonptr.c") if s.startswith(b"/") or s == b""]
    return seeds


def http_route_seeds():
    """A method byte ('0' GET, '1' HEAD, '2' POST, '3' DELETE), then the target."""
    paths = [b"/metrics", b"/healthz", b"/readyz", b"/v1/stuck", b"/v1/instances/order/O-1",
             b"/v1/instances/order/a%2Fb", b"/v1/instances/order/", b"/v1/instances//k",
             b"/v1/instances/order/O-1/extra", b"http://host:9464/metrics", b"https://h",
             b"HTTP://h/v1/stuck", b"metrics", b"", b"/%", b"/%4", b"/%zz", b"/%00", b"/%C3%A9",
             b"/%C3", b"/%ED%A0%80", b"/%F4%90%80%80", b"/\xc3/\xa9", b"/" + b"a" * 2047,
             b"/" + b"a" * 2048, b"/a/b/c/d/e/f/g", b"/v1/instances/%2F/%25"]
    seeds = [b"0" + p for p in paths]
    seeds += [m + p for m in (b"1", b"2", b"3") for p in paths[:5]]
    seeds.append(b"0/a%ca\x93")  # fuzz_http_route's first finding (a 404 quoting raw bytes)
    seeds.append(b"2/v1/instances/order/%ca\x93")  # the same in a 405
    actions = [b"/v1/alerts/17/ack", b"/v1/alerts/17/resolve", b"/v1/alerts/x/close",
               b"/v1/instances/order/O-1/close", b"/v1/instances/order/O-1/move",
               b"/v1/instances/order/a%2Fb/claim", b"/v1/instances/order/O-1/ack",
               b"/v1/silences", b"/v1/silences/3/unsilence", b"/v1/silences/3",
               b"/v1/instances/order/%ca\x93/release"]
    seeds += [m + p for m in (b"0", b"2", b"3") for p in actions]
    return seeds


def retry_after_seeds():
    prefix = struct.pack("<qq", 300000, 1764500000000)
    big = struct.pack("<qq", 0x7FFFFFFFFFFFFFFF, 1764500000000)
    values = [b"120", b"0", b" 5 ", b"\t7\r\n", b"99999999999999999999999", b"-1", b"1.5", b"",
              b"Wed, 21 Oct 2015 07:28:00 GMT", b"Sun, 06 Nov 1994 08:49:37 GMT",
              b"Sunday, 06-Nov-94 08:49:37 GMT", b"Sun Nov  6 08:49:37 1994",
              b"Fri, 31 Dec 9999 23:59:59 GMT", b"soon", b"1" * 130]
    # delta-seconds just past a cap at the top of its range: 9223372036854776 * 1000
    # overflowed before the fix
    values.append(b"9223372036854776")
    return [prefix + v for v in values] + [big + v for v in values]


def sink_response_seeds():
    seeds = []
    for status, headers, body in [
            (429, b"Retry-After: 30\r\n", b'{"status":"throttled"}'),
            (500, b"Content-Type: text/html\r\n", b"<html>Internal Server Error</html>"),
            (400, b"", b'{"status":"invalid event","errors":["routing_key missing"]}'),
            (503, b"retry-after: Wed, 21 Oct 2015 07:28:00 GMT\r\n", b"busy"),
            (502, b"", b"Bad gateway \xe9t\xe9"),  # Latin-1 from a proxy
            (500, b"", "é".encode() * 300),  # UTF-8 cut at the kept length
            (404, b"", b"not\x00found"),
            (202, b"", b'{"status":"success","dedup_key":"k"}')]:
        code = status - 100
        seeds.append(bytes([code >> 8, code & 0xFF, 7]) + b"HTTP/1.1 %d X\r\n" % status + headers +
                     b"\r\n" + body)
    return seeds


def template_seeds():
    """The template, 0xFF, the captured variables, 0xFF, the instance key."""
    import json
    templates = []
    for text in files("definitions/*/*.json"):
        try:
            doc = json.loads(text)
        except ValueError:
            continue
        for state in (doc.get("states") or {}).values():
            command = state.get("command") if isinstance(state, dict) else None
            if isinstance(command, dict) and "payload" in command:
                templates.append(json.dumps(command["payload"]).encode())
    templates += [
        b'{"order": "${key}", "total": "${vars.total}", "n": "${attempt}"}',
        b'{"t": "${token}", "s": "${state} of ${process}", "a": ["${vars.items}", 1, null]}',
        b'"${key}"', b'"${vars.total}"', b'"x${vars.total}y"', b'"${vars.}"', b'"${vars}"',
        b'"${unknown}"', b'"${"', b'"${key"', b'"}${key}${"', b'"$${key}}"', b'"${}"',
        b'{"deep": [[[{"k": "${vars.n}"}]]]}', b'{"\u00e9": "${vars.\u00e9}"}',
        b'"${vars.' + b"a" * 300 + b'}"', b'"${vars.' + "\u00e9".encode() * 300 + b'}"',
        b'"${' + "é".encode() * 300 + b'}"', b'{"n": 1.5e300, "b": true}', b"[]", b"{}"]
    vars_ = [b'{"total": 12.5, "items": ["a", "b"], "n": 3}', b'{}', b'',
             b'{"total": "\u0000x", "items": {"sku": "\u00e9"}}',
             b'{"' + b"a" * 300 + b'": 1, "total": null}', b'{"\u00e9": 1}']
    keys = [b"O-1", "é-42".encode(), b"", b"\xff\xfe", b"k" * 1024]
    seeds = []
    for i, t in enumerate(templates):
        seeds.append(t + b"\xff" + vars_[i % len(vars_)] + b"\xff" + keys[i % len(keys)])
    seeds += [s for s in literals("tests/unit/test_template.c") if b"${" in s]
    return seeds


def avro_seeds():
    # The first byte picks fuzz_avro's schema (0: every type, 1: a
    # recursive record, 2: maps of arrays of maps, 3: a top-level union).
    every = (b"\x06abc" + b"\x04" + b"\x80\x01" + b"\x00\x00\x80\x3f"
             + b"\x00" * 7 + b"\x40" + b"\x01" + b"\x04hi" + b"xyz" + b"\x02"
             + b"\x04\x02\x04\x00" + b"\x02\x02k\x02\x02v\x00")
    node = b"\x02" + b"\x02" + b"\x04\x00\x00" + b"\x00" + b"\x00"
    chain = b"".join(b"\x02\x00\x02" for _ in range(20)) + b"\x02\x00\x00"
    return [b"\x00" + every, b"\x00" + every[:-3], b"\x00" + every + b"\x00",
            b"\x01" + node, b"\x01" + chain, b"\x02\x02\x02a\x02\x02\x02b\x02hi\x00\x00\x00",
            b"\x03\x00", b"\x03\x02\x06abc", b"\x03\x04\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01",
            b"\x03\x06\x03\x10" + b"\x00" * 8 + b"\x00", b"\x00\x06\xff\xfe\xfd", b"\x00"]


TARGETS = {
    "message": message_seeds,
    "definition": definition_seeds,
    "config": config_seeds,
    "duration": duration_seeds,
    "time": time_seeds,
    "jsonptr": jsonptr_seeds,
    "http_route": http_route_seeds,
    "retry_after": retry_after_seeds,
    "sink_response": sink_response_seeds,
    "template": template_seeds,
    "avro": avro_seeds,
}


def main():
    for target, make in TARGETS.items():
        d = os.path.join(CORPUS, target)
        os.makedirs(d, exist_ok=True)
        added = 0
        for seed in make():
            if len(seed) > MAX_SEED:
                continue
            path = os.path.join(d, hashlib.sha1(seed).hexdigest())
            if not os.path.exists(path):
                with open(path, "wb") as f:
                    f.write(seed)
                added += 1
        print("%-14s %4d seeds (%d new)" % (target, len(os.listdir(d)), added))


if __name__ == "__main__":
    main()
