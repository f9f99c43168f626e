#!/usr/bin/env python3
"""Independent HTTP/2 test peer that behaves like the APNs provider API.

This server is deliberately NOT built from the project's own code: the HTTP/2
framing, HPACK, stream state machine and flow control all come from the PyPI
``h2`` library (python-hyper), TLS from Python's ``ssl`` module and ES256
verification from PyPI ``cryptography``.  A Swift test starts it to prove that
requests produced by the project's HTTP/2 APNs client are accepted by an HTTP/2
implementation we did not write, and that they follow Apple's request rules.

Transport
  * Listens on 127.0.0.1:PORT (--port 0 picks a free port), TLS 1.2 or newer.
    ALPN must negotiate "h2"; any other outcome closes the connection at once.
  * With --client-ca an optional client certificate is requested
    (ssl.CERT_OPTIONAL) and verified against that CA.  A connection that
    presented one is certificate-authenticated: its authorization header is
    ignored.
  * Server SETTINGS advertise MAX_CONCURRENT_STREAMS = --max-streams.  Every
    received DATA byte is acknowledged (WINDOW_UPDATE), so clients can send many
    bodies on many concurrent streams and connections.  h2 validates inbound
    headers; any protocol violation (bad frame, bad header, ...) ends only that
    connection with GOAWAY.  Opening more streams than advertised is treated
    strictly (h2's behaviour): GOAWAY(PROTOCOL_ERROR), not REFUSED_STREAM.

Request checks (in this order; first failure is answered)
  405 MethodNotAllowed      :method is not POST
  404 BadPath               :scheme is not https, or :path not under /3/device/
  400 BadDeviceToken        token in /3/device/<token> not an even number of
                            lower-case hex digits
  400 DuplicateHeaders      a header name occurs more than once
  403 MissingProviderToken  no client certificate and no authorization header
  403 InvalidProviderToken  not "bearer <h>.<c>.<s>", bad base64url/JSON,
                            alg != ES256, unknown kid (--jwt-key), iss != --team,
                            iat not an integer or > 60 s in the future, or bad
                            ES256 signature (raw 64-byte R||S and DER accepted)
  403 ExpiredProviderToken  valid signature but iat older than 3600 s
  400 MissingTopic          no apns-topic
  400 InvalidPushType       apns-push-type missing or not one of alert,
                            background, voip, complication, fileprovider, mdm,
                            location, liveactivity, pushtotalk, widgets, controls
  400 BadTopic              topic suffix does not fit the push type (voip ->
                            .voip, complication -> .complication, fileprovider
                            -> .pushkit.fileprovider, location ->
                            .location-query, liveactivity ->
                            .push-type.liveactivity, pushtotalk -> .voip-ptt,
                            widgets -> .push-type.widgets, controls ->
                            .push-type.controls; alert/background must carry
                            none of these suffixes; mdm is not checked)
  400 BadMessageId          apns-id not a canonical lower-case UUID
  400 BadPriority           apns-priority not 10, 5 or 1, or 10 with background
  400 BadExpirationDate     apns-expiration not a non-negative integer
  400 BadCollapseId         apns-collapse-id longer than 64 bytes
  400 PayloadEmpty          empty body
  413 PayloadTooLarge       body > 4096 bytes (> 5120 bytes for voip)
  400 BadPayload            body is not a JSON object (not an Apple reason)
  400 BadDeviceToken        token listed in --bad-tokens
  500 InternalServerError   a bug in this peer while checking (logged)

Responses
  success: HEADERS(:status 200, apns-id) with END_STREAM, no body.
  error:   HEADERS(:status, content-type: application/json, content-length,
           apns-id) then DATA {"reason": "..."} with END_STREAM.
  apns-id echoes the request's (when valid) or is a fresh uuid4.

Output
  stdout: exactly one line {"event":"ready","port":N} once listening.
  stderr: diagnostics only.
  --record FILE: one JSON object per answered request (see RECORD below),
  flushed before the response is written, and on exit (SIGTERM/SIGINT).

RECORD line:
  {"connection": n, "stream": id, "method": str, "scheme": str,
   "authority": str|null, "path": str, "headers": {name: value, ...},
   "body": str, "status": int, "reason": str|null,
   "auth": "certificate"|"token"|"none",
   "jwt": {"kid": str, "iss": any, "iat": any, "signature": "raw"|"der"}|null}
  headers holds every non-pseudo header (a repeated name's values are joined
  with ", "); body is the request body decoded as UTF-8 (invalid bytes
  replaced); jwt is null when no token was present or it could not be parsed.

CHANNELS CLIENT (h2_peer.py channels-client --port N --ca CA [--cert C --key K]
                 [--authorization "bearer <JWT>"] --bundle BUNDLE_ID)
  The same libraries as an HTTP/2 *client* of Apple's broadcast API
  (docs/apns-protocol.md §7): over one TLS connection (ALPN h2, the client
  certificate when given, the authorization header on every request when
  given) it runs a fixed script and prints one JSON line per request:
    create-stored      POST   /1/apps/B/channels  {"message-storage-policy":1,"push-type":"LiveActivity"}
    create-unstored    POST   /1/apps/B/channels  {"message-storage-policy":0,"push-type":"LiveActivity"}
    list               GET    /1/apps/B/all-channels
    read               GET    /1/apps/B/channels      apns-channel-id: <stored>
    broadcast          POST   /4/broadcasts/apps/B    channel <stored>, liveactivity,
                                                      priority 10, expiration 1900000000
    broadcast-expiring POST   /4/broadcasts/apps/B    channel <unstored>, expiration 1900000000
    delete             DELETE /1/apps/B/channels      apns-channel-id: <stored>
    read-deleted       GET    /1/apps/B/channels      apns-channel-id: <stored>
    list-after-delete  GET    /1/apps/B/all-channels
  Each line: {"step", "method", "path", "status", "headers": {name: value},
  "body": str, "requestID": the apns-request-id sent}.  Exit status 0 once
  every request was answered, whatever the answers; 1 on a transport failure.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import json
import re
import signal
import socket
import ssl
import sys
import time
import traceback
import uuid
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import (
    decode_dss_signature,
    encode_dss_signature,
)

PUSH_TYPE_SUFFIX = {
    "voip": ".voip",
    "complication": ".complication",
    "fileprovider": ".pushkit.fileprovider",
    "location": ".location-query",
    "liveactivity": ".push-type.liveactivity",
    "pushtotalk": ".voip-ptt",
    "widgets": ".push-type.widgets",
    "controls": ".push-type.controls",
}
PUSH_TYPES = {"alert", "background", "mdm", *PUSH_TYPE_SUFFIX}
PATH_PREFIX = "/3/device/"
TOKEN_RE = re.compile(r"^(?:[0-9a-f]{2})+$")
UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
B64URL_RE = re.compile(r"^[A-Za-z0-9_-]*$")
INT_RE = re.compile(r"^[0-9]+$")
MAX_PAYLOAD = 4096
MAX_VOIP_PAYLOAD = 5120
MAX_STORED_BODY = 1 << 20  # bytes kept per stream; the rest is counted only
TOKEN_MAX_AGE = 3600
TOKEN_MAX_SKEW = 60
READ_SIZE = 65536


def log(msg: str) -> None:
    print(f"h2_peer: {msg}", file=sys.stderr, flush=True)


class Reject(Exception):
    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason


# --------------------------------------------------------------------------
# Provider token (JWT, ES256)
# --------------------------------------------------------------------------

def b64url_decode(part: str) -> bytes:
    if not B64URL_RE.match(part) or len(part) % 4 == 1:
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def check_provider_token(
    authorization: str | None,
    keys: dict[str, ec.EllipticCurvePublicKey],
    team: str | None,
    jwt_info: dict[str, Any],
) -> None:
    """Raise Reject unless `authorization` carries a valid APNs provider token.

    Fills jwt_info (kid/iss/iat/signature) as far as the token could be parsed.
    """
    if authorization is None:
        raise Reject(403, "MissingProviderToken")
    invalid = Reject(403, "InvalidProviderToken")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise invalid
    parts = token.strip().split(".")
    if len(parts) != 3:
        raise invalid
    try:
        header = json.loads(b64url_decode(parts[0]))
        claims = json.loads(b64url_decode(parts[1]))
        signature = b64url_decode(parts[2])
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise invalid from None
    if not isinstance(header, dict) or not isinstance(claims, dict):
        raise invalid
    kid, iss, iat = header.get("kid"), claims.get("iss"), claims.get("iat")
    if len(signature) == 64:
        form = "raw"
        der = encode_dss_signature(
            int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big")
        )
    else:
        form = "der"
        der = signature
        try:
            decode_dss_signature(der)
        except ValueError:
            form = "invalid"
    jwt_info.update({"kid": kid, "iss": iss, "iat": iat, "signature": form})

    if header.get("alg") != "ES256" or not isinstance(kid, str) or kid not in keys:
        raise invalid
    if form == "invalid":
        raise invalid
    try:
        keys[kid].verify(der, f"{parts[0]}.{parts[1]}".encode("ascii"),
                         ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        raise invalid from None
    if not isinstance(iss, str) or (team is not None and iss != team):
        raise invalid
    if not isinstance(iat, int) or isinstance(iat, bool):
        raise invalid
    now = time.time()
    if iat > now + TOKEN_MAX_SKEW:
        raise invalid
    if iat < now - TOKEN_MAX_AGE:
        raise Reject(403, "ExpiredProviderToken")


# --------------------------------------------------------------------------
# Request checks
# --------------------------------------------------------------------------

class Request:
    def __init__(self, stream_id: int, headers: list[tuple[str, str]]):
        self.stream_id = stream_id
        self.raw_headers = headers
        self.body = bytearray()
        self.body_len = 0

    def add_body(self, data: bytes) -> None:
        self.body_len += len(data)
        room = MAX_STORED_BODY - len(self.body)
        if room > 0:
            self.body += data[:room]


class Peer:
    """Shared configuration and the record file."""

    def __init__(self, args: argparse.Namespace):
        self.team: str | None = args.team
        self.keys = {kid: key for kid, key in args.jwt_key}
        self.bad_tokens: set[str] = set()
        if args.bad_tokens:
            with open(args.bad_tokens, encoding="utf-8") as f:
                self.bad_tokens = {ln.strip().lower() for ln in f if ln.strip()}
        self.max_streams: int = args.max_streams
        self.initial_window: int = args.initial_window
        self.header_table_size: int = args.header_table_size
        self.record_file = open(args.record, "w", encoding="utf-8")
        self.record_dirty = False
        self.connections = 0

    def record(self, entry: dict[str, Any]) -> None:
        self.record_file.write(json.dumps(entry, separators=(",", ":")) + "\n")
        self.record_dirty = True

    def flush(self) -> None:
        if self.record_dirty and not self.record_file.closed:
            self.record_file.flush()
            self.record_dirty = False

    def check(self, req: Request, client_cert: bool, jwt_info: dict[str, Any]) -> str:
        """Return the apns-id to answer with, or raise Reject."""
        pseudo: dict[str, str] = {}
        regular: dict[str, str] = {}
        duplicate = False
        for name, value in req.raw_headers:
            target = pseudo if name.startswith(":") else regular
            if name in target:
                duplicate = True
            target[name] = value

        if pseudo.get(":method") != "POST":
            raise Reject(405, "MethodNotAllowed")
        path = pseudo.get(":path", "")
        if pseudo.get(":scheme") != "https" or not path.startswith(PATH_PREFIX):
            raise Reject(404, "BadPath")
        device_token = path[len(PATH_PREFIX):]
        if not TOKEN_RE.match(device_token):
            raise Reject(400, "BadDeviceToken")
        if duplicate:
            raise Reject(400, "DuplicateHeaders")

        if not client_cert:
            check_provider_token(regular.get("authorization"), self.keys, self.team, jwt_info)

        topic = regular.get("apns-topic")
        if not topic:
            raise Reject(400, "MissingTopic")
        push_type = regular.get("apns-push-type")
        if push_type not in PUSH_TYPES:
            raise Reject(400, "InvalidPushType")
        if push_type in PUSH_TYPE_SUFFIX:
            if not topic.endswith(PUSH_TYPE_SUFFIX[push_type]):
                raise Reject(400, "BadTopic")
        elif push_type in ("alert", "background"):
            if any(topic.endswith(s) for s in PUSH_TYPE_SUFFIX.values()):
                raise Reject(400, "BadTopic")

        apns_id = regular.get("apns-id")
        if apns_id is not None and not UUID_RE.match(apns_id):
            raise Reject(400, "BadMessageId")
        priority = regular.get("apns-priority")
        if priority is not None:
            if priority not in ("10", "5", "1"):
                raise Reject(400, "BadPriority")
            if priority == "10" and push_type == "background":
                raise Reject(400, "BadPriority")
        expiration = regular.get("apns-expiration")
        if expiration is not None and not INT_RE.match(expiration):
            raise Reject(400, "BadExpirationDate")
        collapse_id = regular.get("apns-collapse-id")
        if collapse_id is not None and len(collapse_id.encode("utf-8")) > 64:
            raise Reject(400, "BadCollapseId")

        if req.body_len == 0:
            raise Reject(400, "PayloadEmpty")
        limit = MAX_VOIP_PAYLOAD if push_type == "voip" else MAX_PAYLOAD
        if req.body_len > limit:
            raise Reject(413, "PayloadTooLarge")
        try:
            payload = json.loads(bytes(req.body).decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise Reject(400, "BadPayload") from None
        if not isinstance(payload, dict):
            raise Reject(400, "BadPayload")

        if device_token in self.bad_tokens:
            raise Reject(400, "BadDeviceToken")
        return apns_id or str(uuid.uuid4())


# --------------------------------------------------------------------------
# One connection
# --------------------------------------------------------------------------

class Connection:
    def __init__(self, peer: Peer, number: int, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter, client_cert: bool):
        self.peer = peer
        self.number = number
        self.reader = reader
        self.writer = writer
        self.client_cert = client_cert
        config = h2.config.H2Configuration(
            client_side=False,
            header_encoding="utf-8",
            validate_inbound_headers=True,
            normalize_inbound_headers=True,
            validate_outbound_headers=True,
        )
        self.conn = h2.connection.H2Connection(config=config)
        self.conn.local_settings = h2.settings.Settings(
            client=False,
            initial_values={
                h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: peer.max_streams,
                h2.settings.SettingCodes.MAX_HEADER_LIST_SIZE: 65536,
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: peer.initial_window,
                h2.settings.SettingCodes.HEADER_TABLE_SIZE: peer.header_table_size,
            },
        )
        self.requests: dict[int, Request] = {}
        self.pending: dict[int, bytearray] = {}  # response bodies blocked by flow control
        self.closing = False

    async def run(self) -> None:
        self.conn.initiate_connection()
        await self.send()
        while not self.closing:
            data = await self.reader.read(READ_SIZE)
            if not data:
                break
            try:
                events = self.conn.receive_data(data)
            except h2.exceptions.ProtocolError as e:
                log(f"connection {self.number}: protocol error, closing: {e!r}")
                self.closing = True
                events = []
            for event in events:
                self.handle(event)
            self.peer.flush()  # records hit the disk before their responses go out
            await self.send()

    async def shutdown(self) -> None:
        """Graceful GOAWAY on server shutdown (best effort)."""
        try:
            self.conn.close_connection()
            await self.send()
        except Exception:
            pass

    async def send(self) -> None:
        out = self.conn.data_to_send()
        if out:
            self.writer.write(out)
            await self.writer.drain()

    def handle(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.RequestReceived):
            self.requests[event.stream_id] = Request(event.stream_id, list(event.headers))
        elif isinstance(event, h2.events.DataReceived):
            req = self.requests.get(event.stream_id)
            if req is not None:
                req.add_body(event.data)
            # Give the window back at once (stream and connection level).
            self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.StreamEnded):
            req = self.requests.pop(event.stream_id, None)
            if req is not None:
                self.answer(req)
        elif isinstance(event, h2.events.StreamReset):
            self.requests.pop(event.stream_id, None)
            self.pending.pop(event.stream_id, None)
        elif isinstance(event, (h2.events.WindowUpdated, h2.events.RemoteSettingsChanged)):
            self.send_pending()
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.closing = True

    def answer(self, req: Request) -> None:
        jwt_info: dict[str, Any] = {}
        status, reason = 200, None
        headers = dict_headers(req.raw_headers)
        apns_id = headers.get("apns-id")
        try:
            apns_id = self.peer.check(req, self.client_cert, jwt_info)
        except Reject as r:
            status, reason = r.status, r.reason
        except Exception:
            log(f"connection {self.number} stream {req.stream_id}: check failed:\n"
                + traceback.format_exc())
            status, reason = 500, "InternalServerError"
        if apns_id is None or not UUID_RE.match(apns_id):
            apns_id = str(uuid.uuid4())

        pseudo = {n: v for n, v in req.raw_headers if n.startswith(":")}
        if self.client_cert:
            auth = "certificate"
        elif "authorization" in headers:
            auth = "token"
        else:
            auth = "none"
        self.peer.record({
            "connection": self.number,
            "stream": req.stream_id,
            "method": pseudo.get(":method"),
            "scheme": pseudo.get(":scheme"),
            "authority": pseudo.get(":authority"),
            "path": pseudo.get(":path"),
            "headers": headers,
            "body": bytes(req.body).decode("utf-8", errors="replace"),
            "status": status,
            "reason": reason,
            "auth": auth,
            "jwt": jwt_info or None,
        })

        try:
            if reason is None:
                self.conn.send_headers(req.stream_id, [(":status", "200"), ("apns-id", apns_id)],
                                       end_stream=True)
            else:
                body = json.dumps({"reason": reason}).encode("utf-8")
                self.conn.send_headers(req.stream_id, [
                    (":status", str(status)),
                    ("content-type", "application/json"),
                    ("content-length", str(len(body))),
                    ("apns-id", apns_id),
                ])
                self.pending[req.stream_id] = bytearray(body)
                self.send_pending()
        except h2.exceptions.StreamClosedError:
            self.pending.pop(req.stream_id, None)  # client reset the stream meanwhile

    def send_pending(self) -> None:
        for stream_id in list(self.pending):
            buf = self.pending[stream_id]
            try:
                while buf:
                    window = min(self.conn.local_flow_control_window(stream_id),
                                 self.conn.max_outbound_frame_size)
                    if window <= 0:
                        break
                    chunk = bytes(buf[:window])
                    del buf[:window]
                    self.conn.send_data(stream_id, chunk, end_stream=not buf)
            except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
                buf.clear()
            if not buf:
                del self.pending[stream_id]


def dict_headers(raw: list[tuple[str, str]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in raw:
        if name.startswith(":"):
            continue
        out[name] = f"{out[name]}, {value}" if name in out else value
    return out


# --------------------------------------------------------------------------
# Server
# --------------------------------------------------------------------------

def load_jwt_key(spec: str) -> tuple[str, ec.EllipticCurvePublicKey]:
    kid, sep, path = spec.partition("=")
    if not sep or not kid or not path:
        raise argparse.ArgumentTypeError(f"expected KEYID=PEMFILE, got {spec!r}")
    try:
        with open(path, "rb") as f:
            pem = f.read()
    except OSError as e:
        raise argparse.ArgumentTypeError(f"{path}: {e}") from None
    key: Any
    try:
        key = serialization.load_pem_public_key(pem)
    except ValueError:
        try:
            key = serialization.load_pem_private_key(pem, password=None).public_key()
        except (ValueError, TypeError) as e:
            raise argparse.ArgumentTypeError(f"{path}: not a PEM EC key: {e}") from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name != "secp256r1":
        raise argparse.ArgumentTypeError(f"{path}: not a P-256 EC key")
    return kid, key


def make_ssl_context(args: argparse.Namespace) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(args.cert, args.key)
    ctx.set_alpn_protocols(["h2"])
    if args.client_ca:
        ctx.load_verify_locations(cafile=args.client_ca)
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


async def serve(args: argparse.Namespace) -> None:
    peer = Peer(args)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # A parent process (such as a test runner whose threads block signals) may hand down a
    # mask that blocks SIGTERM; unblock it so the peer can be stopped.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})

    def on_loop_error(_loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        log(f"{context.get('message', 'error')}: {exc!r}" if exc else context.get("message", "error"))
    loop.set_exception_handler(on_loop_error)  # e.g. failed TLS handshakes: log, keep serving

    live: set[Connection] = set()

    async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer.connections += 1
        number = peer.connections
        conn: Connection | None = None
        try:
            ssl_obj = writer.get_extra_info("ssl_object")
            alpn = ssl_obj.selected_alpn_protocol() if ssl_obj else None
            if alpn != "h2":
                log(f"connection {number}: ALPN negotiated {alpn!r}, not 'h2'; closing")
                return
            client_cert = ssl_obj.getpeercert(binary_form=True) is not None
            conn = Connection(peer, number, reader, writer, client_cert)
            live.add(conn)
            await conn.run()
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError) as e:
            log(f"connection {number}: {e!r}")
        except asyncio.CancelledError:
            pass
        except Exception:
            log(f"connection {number}: unexpected error, closing:\n{traceback.format_exc()}")
        finally:
            if conn is not None:
                live.discard(conn)
            peer.flush()
            try:
                writer.close()
            except Exception:
                pass

    server = await asyncio.start_server(on_client, host="127.0.0.1", port=args.port,
                                        ssl=make_ssl_context(args))
    port = server.sockets[0].getsockname()[1]
    print(json.dumps({"event": "ready", "port": port}, separators=(",", ":")), flush=True)

    async def periodic_flush() -> None:
        while True:
            await asyncio.sleep(0.5)
            peer.flush()
    flusher = asyncio.create_task(periodic_flush())

    try:
        await stop.wait()
    finally:
        flusher.cancel()
        server.close()
        for conn in list(live):
            await conn.shutdown()
            conn.writer.close()
        peer.flush()
        peer.record_file.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cert", required=True, help="server certificate chain (PEM)")
    p.add_argument("--key", required=True, help="server private key (PEM)")
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1; 0 = free port")
    p.add_argument("--record", required=True, help="JSON-lines file written with every request")
    p.add_argument("--jwt-key", action="append", default=[], type=load_jwt_key,
                   metavar="KEYID=PEM", help="provider-token key: P-256 public key or .p8 private key")
    p.add_argument("--team", help="required iss claim (team id)")
    p.add_argument("--client-ca", help="CA (PEM) for optional client certificates")
    p.add_argument("--max-streams", type=int, default=100, help="SETTINGS_MAX_CONCURRENT_STREAMS")
    p.add_argument("--bad-tokens", help="file of device tokens (hex, one per line) -> BadDeviceToken")
    p.add_argument("--initial-window", type=int, default=65535,
                   help="SETTINGS_INITIAL_WINDOW_SIZE: how much DATA a stream may send before a WINDOW_UPDATE")
    p.add_argument("--header-table-size", type=int, default=4096,
                   help="SETTINGS_HEADER_TABLE_SIZE: the HPACK dynamic table the client may use")
    args = p.parse_args(argv)
    if args.max_streams < 1:
        p.error("--max-streams must be >= 1")
    return args


# --------------------------------------------------------------------------
# Channels client
# --------------------------------------------------------------------------

class ChannelsClient:
    """A blocking HTTP/2 client on h2: one request at a time on one connection."""

    def __init__(self, args: argparse.Namespace):
        ctx = ssl.create_default_context(cafile=args.ca)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.set_alpn_protocols(["h2"])
        if args.cert:
            ctx.load_cert_chain(args.cert, args.key)
        raw = socket.create_connection(("127.0.0.1", args.port), timeout=30)
        self.sock = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
        if self.sock.selected_alpn_protocol() != "h2":
            raise RuntimeError(f"ALPN negotiated {self.sock.selected_alpn_protocol()!r}, not h2")
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.conn.initiate_connection()
        self.sock.sendall(self.conn.data_to_send())
        self.authorization = args.authorization

    def request(self, method: str, path: str, headers: list[tuple[str, str]],
                body: bytes = b"") -> dict[str, Any]:
        request_id = str(uuid.uuid4())
        stream_id = self.conn.get_next_available_stream_id()
        block = [(":method", method), (":scheme", "https"), (":path", path),
                 (":authority", "127.0.0.1"), ("apns-request-id", request_id)]
        if self.authorization:
            block.append(("authorization", self.authorization))
        self.conn.send_headers(stream_id, block + headers, end_stream=not body)
        if body:
            self.conn.send_data(stream_id, body, end_stream=True)
        self.sock.sendall(self.conn.data_to_send())
        status, answer, data, ended = None, {}, b"", False
        while not ended:
            chunk = self.sock.recv(READ_SIZE)
            if not chunk:
                raise RuntimeError("the server closed the connection")
            for event in self.conn.receive_data(chunk):
                if isinstance(event, h2.events.ResponseReceived) and event.stream_id == stream_id:
                    answer = dict_headers(event.headers)
                    status = int(dict(event.headers)[":status"])
                elif isinstance(event, h2.events.DataReceived):
                    self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                    if event.stream_id == stream_id:
                        data += event.data
                elif isinstance(event, h2.events.StreamEnded) and event.stream_id == stream_id:
                    ended = True
                elif isinstance(event, h2.events.StreamReset) and event.stream_id == stream_id:
                    raise RuntimeError(f"stream reset with {event.error_code}")
                elif isinstance(event, h2.events.ConnectionTerminated):
                    raise RuntimeError(f"GOAWAY {event.error_code}: {event.additional_data!r}")
            pending = self.conn.data_to_send()
            if pending:
                self.sock.sendall(pending)
        return {"method": method, "path": path, "status": status, "headers": answer,
                "body": data.decode("utf-8", "replace"), "requestID": request_id}


def run_channels_client(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description="HTTP/2 client of the broadcast API (§7)")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--ca", required=True, help="CA (PEM) the server certificate chains to")
    p.add_argument("--cert", help="client certificate (PEM)")
    p.add_argument("--key", help="client certificate's private key (PEM)")
    p.add_argument("--authorization", help="authorization header value for every request")
    p.add_argument("--bundle", required=True, help="the app's bundle ID")
    args = p.parse_args(argv)
    channels = f"/1/apps/{args.bundle}/channels"
    all_channels = f"/1/apps/{args.bundle}/all-channels"
    broadcasts = f"/4/broadcasts/apps/{args.bundle}"
    payload = json.dumps({"aps": {"timestamp": 1700000000, "event": "update",
                                  "content-state": {"score": "2-1"}}}).encode()

    def show(step: str, answer: dict[str, Any]) -> dict[str, Any]:
        print(json.dumps({"step": step, **answer}), flush=True)
        return answer

    try:
        client = ChannelsClient(args)
        stored = show("create-stored", client.request(
            "POST", channels, [("content-type", "application/json")],
            b'{"message-storage-policy":1,"push-type":"LiveActivity"}'))
        unstored = show("create-unstored", client.request(
            "POST", channels, [("content-type", "application/json")],
            b'{"message-storage-policy":0,"push-type":"LiveActivity"}'))
        stored_id = stored["headers"].get("apns-channel-id", "")
        unstored_id = unstored["headers"].get("apns-channel-id", "")
        show("list", client.request("GET", all_channels, []))
        show("read", client.request("GET", channels, [("apns-channel-id", stored_id)]))
        update = [("apns-push-type", "liveactivity"), ("apns-priority", "10"),
                  ("apns-expiration", "1900000000")]
        show("broadcast", client.request(
            "POST", broadcasts, [("apns-channel-id", stored_id)] + update, payload))
        show("broadcast-expiring", client.request(
            "POST", broadcasts, [("apns-channel-id", unstored_id)] + update, payload))
        show("delete", client.request("DELETE", channels, [("apns-channel-id", stored_id)]))
        show("read-deleted", client.request("GET", channels, [("apns-channel-id", stored_id)]))
        show("list-after-delete", client.request("GET", all_channels, []))
        client.conn.close_connection()
        client.sock.sendall(client.conn.data_to_send())
        client.sock.close()
    except (OSError, RuntimeError, h2.exceptions.ProtocolError) as e:
        log(f"channels-client: {e}")
        return 1
    return 0

def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "channels-client":
        return run_channels_client(sys.argv[2:])
    args = parse_args()
    try:
        asyncio.run(serve(args))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
