#!/usr/bin/env python3
"""Decodes OTLP/HTTP JSON trace export request bodies (ExportTraceServiceRequest) with the OpenTelemetry project's own
protobuf classes (PyPI's opentelemetry-proto, installed by ./scripts/setup) and prints their spans, normalized, as one
JSON list on stdout. The tests of steadfast's trace export read what it sent through this, not through a hand-written
reader, so a body a real collector would refuse fails the test.

    python3 tests/otlp/decode.py [--js] [FILE...]      (no FILE: one body on stdin)

Each body is decoded by google.protobuf.json_format.Parse(..., ignore_unknown_fields=False) into
opentelemetry.proto.collector.trace.v1.trace_service_pb2.ExportTraceServiceRequest, after the one conversion the OTLP
spec's JSON encoding asks for on top of the proto3 JSON mapping: traceId, spanId and parentSpanId (in spans and in
links) are hex strings there, base64 in proto3 JSON. This decoder is stricter than a collector must be, as a test of
our own exporter should be:
  - an unknown field name fails (a collector ignores it), and so does a proto field name (trace_id) in place of its
    lowerCamelCase JSON name (traceId), which the OTLP spec forbids;
  - ids must be lowercase hex of the exact length (32 digits for a trace id, 16 for a span id), not all zeros;
    parentSpanId may be absent or "";
  - enum values (kind, status.code) must be integers (the OTLP spec forbids names) and known to the proto;
  - null values, duplicate JSON object keys, bare NaN/Infinity, duplicate attribute keys, an attribute without a value
    or with a value that is not a string, bool, int, double or a homogeneous array of those, an empty span or event
    name, a zero start or end time, an end before the start and a span id twice in one body fail.
Any of those exits with status 1 and one line on stderr naming the file.

Each printed span is built from the DECODED message, not from the input JSON:
  {traceId, spanId, parentSpanId (hex, or null when there is none), name, kind (int), startTimeUnixNano (int),
   endTimeUnixNano (int), attributes: {key: value}, events: [{name, timeUnixNano, attributes}],
   links: [{traceId, spanId, attributes}], status: {code, message}, resource: {key: value}, scope: name}
with attribute values as plain JSON (string, int, bool, double, array of those).

--js is for JavaScript's JSON.parse, which rounds integers above 2^53: the *UnixNano times are printed as decimal
strings (tests/otlp/support.mjs turns them into BigInts), and an int attribute outside +-(2^53 - 1) fails.
"""
import base64
import json
import math
import re
import sys

try:
    from google.protobuf import json_format
    from google.protobuf.descriptor import FieldDescriptor
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
except ImportError as e:  # pragma: no cover - only without ./scripts/setup
    sys.exit(f"decode.py: {e}: install PyPI's opentelemetry-proto==1.45.2 for this python3 (./scripts/setup does)")


class Invalid(Exception):
    pass


# The bytes fields the OTLP JSON encoding writes as hex, by proto field name, with their length in hex digits.
HEX_IDS = {"trace_id": 32, "span_id": 16, "parent_span_id": 16}
MAX_SAFE_JS_INT = 2**53 - 1


def load_json(text):
    def no_duplicates(pairs):
        obj = {}
        for key, value in pairs:
            if key in obj:
                raise Invalid(f"duplicate JSON object key {key!r}")
            obj[key] = value
        return obj

    def no_constant(name):
        raise Invalid(f"{name} is not JSON")

    try:
        return json.loads(text, object_pairs_hook=no_duplicates, parse_constant=no_constant)
    except json.JSONDecodeError as e:
        raise Invalid(f"not JSON: {e}") from None


def to_proto3_json(obj, descriptor, path):
    """Checks obj's keys, enums and ids against the message descriptor and rewrites the hex ids to base64 in place.
    Anything of the wrong type is left for json_format.Parse to refuse."""
    if not isinstance(obj, dict):
        return
    by_json_name = {f.json_name: f for f in descriptor.fields}
    by_name = {f.name: f for f in descriptor.fields}
    for key in list(obj):
        value = obj[key]
        field = by_json_name.get(key)
        where = f"{path}.{key}" if path else key
        if field is None:
            if key in by_name:
                raise Invalid(f"{where}: OTLP JSON names fields in lowerCamelCase: {by_name[key].json_name!r}, "
                              f"not the proto field name {key!r}")
            continue  # Parse names it as an unknown field
        if value is None:
            raise Invalid(f"{where}: null")
        if field.type == FieldDescriptor.TYPE_ENUM:
            if not isinstance(value, int) or isinstance(value, bool):
                raise Invalid(f"{where}: {value!r}: OTLP JSON writes enum values as integers")
            if value not in field.enum_type.values_by_number:
                raise Invalid(f"{where}: {value} is not a value of {field.enum_type.full_name}")
        elif field.type == FieldDescriptor.TYPE_BYTES and field.name in HEX_IDS:
            obj[key] = hex_to_base64(value, HEX_IDS[field.name], field.name == "parent_span_id", where)
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            if field.is_repeated and isinstance(value, list):
                for i, item in enumerate(value):
                    to_proto3_json(item, field.message_type, f"{where}[{i}]")
            elif not field.is_repeated:
                to_proto3_json(value, field.message_type, where)


def hex_to_base64(value, digits, may_be_empty, where):
    if may_be_empty and value == "":
        return ""
    if not isinstance(value, str) or not re.fullmatch(f"[0-9a-f]{{{digits}}}", value):
        raise Invalid(f"{where}: {value!r} is not {digits} lowercase hex digits")
    return base64.b64encode(bytes.fromhex(value)).decode("ascii")


def check_id(raw, length, where, may_be_empty=False):
    """An id of the decoded message as hex, or None for an empty parent span id."""
    if may_be_empty and raw == b"":
        return None
    if len(raw) != length:
        raise Invalid(f"{where}: {len(raw)} bytes, not {length}")
    if raw == bytes(length):
        raise Invalid(f"{where}: all zeros (an invalid id)")
    return raw.hex()


def any_value(value, where, js, in_array=False):
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return value.string_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "int_value":
        if js and abs(value.int_value) > MAX_SAFE_JS_INT:
            raise Invalid(f"{where}: {value.int_value} is outside JavaScript's safe integers (--js)")
        return value.int_value
    if kind == "double_value":
        if not math.isfinite(value.double_value):
            raise Invalid(f"{where}: {value.double_value} has no plain JSON form")
        return value.double_value
    if kind == "array_value" and not in_array:
        items = [any_value(v, f"{where}[{i}]", js, True) for i, v in enumerate(value.array_value.values)]
        kinds = {v.WhichOneof("value") for v in value.array_value.values}
        if len(kinds) > 1:
            raise Invalid(f"{where}: an attribute array mixes {', '.join(sorted(kinds))}")
        return items
    raise Invalid(f"{where}: {kind or 'no value'}: an attribute value is a string, bool, int, double "
                  "or an array of one of those")


def attributes(kvs, where, js):
    out = {}
    for i, kv in enumerate(kvs):
        at = f"{where}[{i}]"
        if kv.key_strindex:
            raise Invalid(f"{at}: keyStrindex has no dictionary in a trace export")
        if not kv.key:
            raise Invalid(f"{at}: empty key")
        if kv.key in out:
            raise Invalid(f"{at}: duplicate attribute key {kv.key!r}")
        if not kv.HasField("value"):
            raise Invalid(f"{at} ({kv.key}): no value")
        out[kv.key] = any_value(kv.value, f"{at} ({kv.key})", js)
    return out


def decode(text, js):
    body = load_json(text)
    if not isinstance(body, dict):
        raise Invalid("the body is not a JSON object")
    to_proto3_json(body, ExportTraceServiceRequest.DESCRIPTOR, "")
    request = ExportTraceServiceRequest()
    try:
        json_format.Parse(json.dumps(body), request, ignore_unknown_fields=False)
    except json_format.ParseError as e:
        raise Invalid(str(e)) from None

    nanos = str if js else int
    spans, seen = [], set()
    for r, rs in enumerate(request.resource_spans):
        rwhere = f"resourceSpans[{r}]"
        resource = attributes(rs.resource.attributes, f"{rwhere}.resource.attributes", js)
        for s, ss in enumerate(rs.scope_spans):
            for p, span in enumerate(ss.spans):
                where = f"{rwhere}.scopeSpans[{s}].spans[{p}]"
                trace_id = check_id(span.trace_id, 16, f"{where}.traceId")
                span_id = check_id(span.span_id, 8, f"{where}.spanId")
                parent = check_id(span.parent_span_id, 8, f"{where}.parentSpanId", may_be_empty=True)
                if (trace_id, span_id) in seen:
                    raise Invalid(f"{where}: span {span_id} of trace {trace_id} is in the body twice")
                seen.add((trace_id, span_id))
                if not span.name:
                    raise Invalid(f"{where}.name: empty")
                if not span.start_time_unix_nano or not span.end_time_unix_nano:
                    raise Invalid(f"{where}: startTimeUnixNano and endTimeUnixNano are required (not 0)")
                if span.end_time_unix_nano < span.start_time_unix_nano:
                    raise Invalid(f"{where} ({span.name}): endTimeUnixNano {span.end_time_unix_nano} is before "
                                  f"startTimeUnixNano {span.start_time_unix_nano}")
                events = []
                for e, event in enumerate(span.events):
                    ewhere = f"{where}.events[{e}]"
                    if not event.name:
                        raise Invalid(f"{ewhere}.name: empty")
                    if not event.time_unix_nano:
                        raise Invalid(f"{ewhere}.timeUnixNano: required (not 0)")
                    events.append({
                        "name": event.name,
                        "timeUnixNano": nanos(event.time_unix_nano),
                        "attributes": attributes(event.attributes, f"{ewhere}.attributes", js),
                    })
                links = []
                for k, link in enumerate(span.links):
                    lwhere = f"{where}.links[{k}]"
                    links.append({
                        "traceId": check_id(link.trace_id, 16, f"{lwhere}.traceId"),
                        "spanId": check_id(link.span_id, 8, f"{lwhere}.spanId"),
                        "attributes": attributes(link.attributes, f"{lwhere}.attributes", js),
                    })
                spans.append({
                    "traceId": trace_id,
                    "spanId": span_id,
                    "parentSpanId": parent,
                    "name": span.name,
                    "kind": int(span.kind),
                    "startTimeUnixNano": nanos(span.start_time_unix_nano),
                    "endTimeUnixNano": nanos(span.end_time_unix_nano),
                    "attributes": attributes(span.attributes, f"{where}.attributes", js),
                    "events": events,
                    "links": links,
                    "status": {"code": int(span.status.code), "message": span.status.message},
                    "resource": resource,
                    "scope": ss.scope.name,
                })
    return spans


def main(argv):
    js = "--js" in argv
    paths = [a for a in argv if a != "--js"]
    if any(p.startswith("-") and p != "-" for p in paths):
        sys.exit(f"usage: decode.py [--js] [FILE...]  (unknown option in {paths})")
    spans = []
    for path in paths or ["-"]:
        name = "<stdin>" if path == "-" else path
        try:
            if path == "-":
                text = sys.stdin.read()
            else:
                with open(path, encoding="utf-8") as f:
                    text = f.read()
            spans.extend(decode(text, js))
        except (Invalid, OSError, UnicodeDecodeError) as e:
            print(f"decode.py: {name}: {e}", file=sys.stderr)
            return 1
    json.dump(spans, sys.stdout, allow_nan=False)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
