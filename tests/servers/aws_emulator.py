#!/usr/bin/python3
"""What exists only inside AWS, for the credential tests, following AWS's
documented protocols and handing out real radosgw credentials:

  metadata mode: EC2 instance metadata (IMDSv2: PUT /latest/api/token, then
    /latest/meta-data/iam/security-credentials/[ROLE] with the token), ECS/EKS
    container credentials (GET /container/credentials with the Authorization
    token), the IAM Identity Center portal (GET /federation/credentials with
    x-amz-sso_bearer_token), and STS AssumeRoleWithWebIdentity (POST /).
    Every answer is the current generation of a radosgw user's keys, with an
    Expiration LIFETIME seconds after the generation began. A new generation
    (a new radosgw user, let into BUCKET by its policy) begins every
    LIFETIME/2 seconds, and each user is suspended in radosgw the moment its
    credentials expire: a client that does not renew them in time fails.

  s3front mode: S3 in front of radosgw as AWS answers for a bucket of
    another region (BUCKET_REGION); with --opaque-etags, as an SSE-KMS or
    SSE-C bucket names objects and parts (ETags that are no MD5: the real
    ones hashed, mapped back in If-Match and in CompleteMultipartUpload): a request signed for another region gets
    301 PermanentRedirect with x-amz-bucket-region (HEAD) or 400
    AuthorizationHeaderMalformed naming the region (and an <Endpoint> on
    another host, which a client must not follow). Virtual-hosted requests
    (Host: BUCKET.localhost:PORT) have their signature checked, then are sent
    on path-style, signed again. Anything else is forwarded as it came.

Prints "listening PORT" once it serves. GET /__emulator__/stats answers
what it did as JSON; GET /__emulator__/revoke starts a new generation and
suspends every older user at once (keys revoked under a reader).

  aws_emulator.py metadata --rgw-env FILE --bucket B [--lifetime S] [--token T]
  aws_emulator.py s3front --rgw-env FILE --bucket-region R
"""
import argparse
import datetime
import hashlib
import http.client
import json
import re
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from unittest import mock

import boto3
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials


def parse_env(path):
    env = {}
    with open(path) as f:
        for line in f:
            name, _, value = line.strip().removeprefix("export ").partition("=")
            env[name] = value.strip('"')
    return env


def iso(t):
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Rotator:
    """Generations of radosgw users: one begins every lifetime/2 s; each is
    suspended when its credentials expire."""

    def __init__(self, rgw, bucket, lifetime):
        self.rgw, self.bucket, self.lifetime = rgw, bucket, lifetime
        self.run = uuid.uuid4().hex[:6]
        self.lock = threading.Lock()
        self.generations = []  # dicts: uid, key, secret, begun, expires, suspended
        self.stats = {"generations": 0, "suspended": 0, "answers": {}}
        self.owner = boto3.client(
            "s3", endpoint_url=rgw["AWS_ENDPOINT_URL"], region_name=rgw["AWS_REGION"],
            aws_access_key_id=rgw["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=rgw["AWS_SECRET_ACCESS_KEY"],
            config=Config(s3={"addressing_style": "path"}))
        self.begin()
        threading.Thread(target=self.loop, daemon=True).start()

    def admin(self, *args):
        subprocess.run(["radosgw-admin", "-c", self.rgw["SHARDKIT_RGW_CONF"], "--cluster",
                        self.rgw["SHARDKIT_RGW_CLUSTER"], *args], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)

    def begin(self):
        n = len(self.generations) + 1
        uid = f"sk-{self.run}-{n}"
        key, secret = uuid.uuid4().hex[:20].upper(), uuid.uuid4().hex
        self.admin("user", "create", f"--uid={uid}", f"--display-name={uid}",
                   f"--access-key={key}", f"--secret-key={secret}")
        with self.lock:
            live = [g["uid"] for g in self.generations if not g["suspended"]] + [uid]
        self.owner.put_bucket_policy(Bucket=self.bucket, Policy=json.dumps({
            "Version": "2012-10-17", "Statement": [{
                "Effect": "Allow",
                "Principal": {"AWS": [f"arn:aws:iam:::user/{u}" for u in live]},
                "Action": ["s3:GetObject", "s3:ListBucket"],
                "Resource": [f"arn:aws:s3:::{self.bucket}", f"arn:aws:s3:::{self.bucket}/*"]}]}))
        now = time.time()
        with self.lock:
            self.generations.append({"uid": uid, "key": key, "secret": secret, "begun": now,
                                     "expires": now + self.lifetime, "suspended": False})
            self.stats["generations"] += 1

    def suspend(self, g):
        self.admin("user", "suspend", f"--uid={g['uid']}")
        with self.lock:
            g["suspended"] = True
            self.stats["suspended"] += 1

    def loop(self):
        while True:
            time.sleep(0.2)
            now = time.time()
            with self.lock:
                latest = self.generations[-1]
                due = [g for g in self.generations if not g["suspended"] and g["expires"] <= now]
            for g in due:
                self.suspend(g)
            if now >= latest["begun"] + self.lifetime / 2:
                self.begin()

    def revoke(self):
        with self.lock:
            old = [g for g in self.generations if not g["suspended"]]
        self.begin()
        for g in old:
            self.suspend(g)

    def current(self, kind):
        with self.lock:
            g = self.generations[-1]
            self.stats["answers"][kind] = self.stats["answers"].get(kind, 0) + 1
            return g["key"], g["secret"], g["expires"]


class MetadataHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    rotator = None
    token = "sk-test-token"
    imds_tokens = set()

    def log_message(self, *args):
        pass

    def reply(self, status, body=b"", ctype="application/json"):
        if isinstance(body, str):
            body = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def creds_json(self, kind, token_name="Token"):
        key, secret, expires = self.rotator.current(kind)
        return json.dumps({"Code": "Success", "Type": "AWS-HMAC", "AccessKeyId": key,
                           "SecretAccessKey": secret, token_name: "", "Expiration": iso(expires)})

    def do_PUT(self):
        if self.path == "/latest/api/token":
            ttl = self.headers.get("X-aws-ec2-metadata-token-ttl-seconds")
            if not ttl or not ttl.isdigit():
                return self.reply(400)
            t = uuid.uuid4().hex
            self.imds_tokens.add(t)
            return self.reply(200, t, "text/plain")
        self.reply(404)

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        q = dict(urllib.parse.parse_qsl(url.query))
        if url.path == "/__emulator__/stats":
            with self.rotator.lock:
                return self.reply(200, json.dumps(self.rotator.stats))
        if url.path == "/__emulator__/revoke":
            self.rotator.revoke()
            return self.reply(200, "{}")
        if url.path.startswith("/latest/meta-data/iam/security-credentials/"):
            if self.headers.get("X-aws-ec2-metadata-token") not in self.imds_tokens:
                return self.reply(401)  # IMDSv2 only: a request without the token is refused
            role = url.path.removeprefix("/latest/meta-data/iam/security-credentials/")
            if role == "":
                return self.reply(200, "shardkit-node\n", "text/plain")
            if role != "shardkit-node":
                return self.reply(404)
            return self.reply(200, self.creds_json("imds"))
        if url.path == "/container/credentials":
            if self.headers.get("Authorization") != self.token:
                return self.reply(401)
            return self.reply(200, self.creds_json("container"))
        if url.path == "/federation/credentials":
            if self.headers.get("x-amz-sso_bearer_token") != self.token:
                return self.reply(401, '{"message":"Session token not found or invalid"}')
            if q.get("account_id") != "123456789012" or q.get("role_name") != "Reader":
                return self.reply(403)
            key, secret, expires = self.rotator.current("sso")
            return self.reply(200, json.dumps({"roleCredentials": {
                "accessKeyId": key, "secretAccessKey": secret, "sessionToken": "",
                "expiration": int(expires * 1000)}}))
        self.reply(404)

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        form = dict(urllib.parse.parse_qsl(self.rfile.read(length).decode()))
        if form.get("Action") != "AssumeRoleWithWebIdentity":
            return self.reply(400, "<ErrorResponse><Error><Code>InvalidAction</Code></Error>"
                                   "</ErrorResponse>", "text/xml")
        if form.get("WebIdentityToken") != self.token or not form.get("RoleArn"):
            return self.reply(403, "<ErrorResponse><Error><Code>InvalidIdentityToken</Code>"
                                   "</Error></ErrorResponse>", "text/xml")
        key, secret, expires = self.rotator.current("web_identity")
        self.reply(200, "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult>"
                        f"<Credentials><AccessKeyId>{key}</AccessKeyId><SecretAccessKey>{secret}"
                        "</SecretAccessKey><SessionToken></SessionToken><Expiration>"
                        f"{iso(expires)}</Expiration></Credentials>"
                        "</AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>",
                   "text/xml")


class FrontHandler(BaseHTTPRequestHandler):
    """S3 of another region, and virtual-hosted addressing, over radosgw."""
    protocol_version = "HTTP/1.1"
    rgw = None
    bucket_region = "eu-west-1"
    opaque = False
    real_etags = {}  # opaque -> real
    stats = {"redirected": 0, "virtual": 0, "forwarded": 0, "bad_signature": 0}
    lock = threading.Lock()

    def log_message(self, *args):
        pass

    def count(self, what):
        with self.lock:
            self.stats[what] += 1

    def reply(self, status, body=b"", headers=(), length=None):
        if isinstance(body, str):
            body = body.encode()
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def hide(self, etag):
        """An ETag as an encrypted bucket's: no MD5 of anything sent."""
        if not self.opaque or not etag:
            return etag
        hidden = '"' + hashlib.sha256(etag.encode()).hexdigest()[:32] + '"'
        with self.lock:
            self.real_etags[hidden] = etag
        return hidden

    def reveal(self, text):
        with self.lock:
            for hidden, real in self.real_etags.items():
                text = text.replace(hidden, real)
        return text

    def signed_region(self):
        auth = self.headers.get("Authorization", "")
        if "Credential=" not in auth:
            return None
        return auth.split("Credential=")[1].split("/")[2]

    def signature_ok(self, body):
        """The request's SigV4 signature, recomputed by botocore over what arrived."""
        auth = self.headers["Authorization"]
        signed = auth.split("SignedHeaders=")[1].split(",")[0].split(";")
        headers = {h: self.headers[h] for h in signed if h != "host"}
        url = f"http://{self.headers['Host']}{self.path}"
        req = AWSRequest(method=self.command, url=url, data=body, headers=headers)
        when = datetime.datetime.strptime(self.headers["x-amz-date"], "%Y%m%dT%H%M%SZ")
        with mock.patch("botocore.auth.datetime") as d:
            d.datetime.utcnow.return_value = when
            S3SigV4Auth(Credentials(self.rgw["AWS_ACCESS_KEY_ID"], self.rgw["AWS_SECRET_ACCESS_KEY"],
                                    None), "s3", self.signed_region()).add_auth(req)
        return req.headers["Authorization"] == auth

    def handle_any(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length) if length else b""
        if self.path == "/__emulator__/stats":
            with self.lock:
                return self.reply(200, json.dumps(self.stats))
        region = self.signed_region()
        if region is not None and region != self.bucket_region:
            self.count("redirected")
            if self.command == "HEAD":
                return self.reply(301, b"", [("x-amz-bucket-region", self.bucket_region)])
            return self.reply(400, "<Error><Code>AuthorizationHeaderMalformed</Code><Message>the "
                                   f"region '{region}' is wrong; expecting '{self.bucket_region}'"
                                   f"</Message><Region>{self.bucket_region}</Region><Endpoint>"
                                   "evil.example.com</Endpoint></Error>",
                              [("x-amz-bucket-region", self.bucket_region)])
        host = self.headers.get("Host", "")
        upstream = urllib.parse.urlsplit(self.rgw["AWS_ENDPOINT_URL"])
        headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
        path = self.path
        if ".localhost" in host:  # virtual-hosted: BUCKET.localhost:PORT
            if region is None or not self.signature_ok(body):
                self.count("bad_signature")
                return self.reply(403, "<Error><Code>SignatureDoesNotMatch</Code></Error>")
            self.count("virtual")
            path = "/" + host.split(".localhost")[0] + self.path
            req = AWSRequest(method=self.command, url=self.rgw["AWS_ENDPOINT_URL"] + path,
                             data=body, headers={k: v for k, v in headers.items()
                                                 if k.lower() in ("range", "if-match",
                                                                  "content-md5")})
            req.headers["x-amz-content-sha256"] = hashlib.sha256(body).hexdigest()
            S3SigV4Auth(Credentials(self.rgw["AWS_ACCESS_KEY_ID"],
                                    self.rgw["AWS_SECRET_ACCESS_KEY"], None), "s3",
                        self.rgw["AWS_REGION"]).add_auth(req)
            headers = dict(req.headers.items())
            headers["Host"] = upstream.netloc
        else:
            self.count("forwarded")
            headers["Host"] = host  # radosgw checks the signature against the Host it gets
        if self.opaque and ("If-Match" in headers or b"<CompleteMultipartUpload>" in body):
            # The hidden ETags go back to radosgw's own; the client signed what
            # it sent, so the request is signed again, as it now is.
            if b"<CompleteMultipartUpload>" in body:
                body = self.reveal(body.decode()).encode()
            kept = {k: (self.reveal(v) if k.lower() == "if-match" else v)
                    for k, v in headers.items()
                    if k.lower() in ("range", "if-match", "content-md5", "content-type")
                    or k.lower().startswith("x-amz-meta-")}
            req = AWSRequest(method=self.command, url=self.rgw["AWS_ENDPOINT_URL"] + path,
                             data=body, headers=kept)
            req.headers["x-amz-content-sha256"] = hashlib.sha256(body).hexdigest()
            S3SigV4Auth(Credentials(self.rgw["AWS_ACCESS_KEY_ID"],
                                    self.rgw["AWS_SECRET_ACCESS_KEY"], None), "s3",
                        self.rgw["AWS_REGION"]).add_auth(req)
            headers = dict(req.headers.items())
            headers["Host"] = upstream.netloc
        conn = http.client.HTTPConnection(upstream.hostname, upstream.port, timeout=60)
        conn.request(self.command, path, body=body, headers=headers)
        r = conn.getresponse()
        data = r.read()
        if self.opaque:
            data = data.replace(b"&quot;", b'"')
            for etag in set(re.findall(rb'"[0-9a-f]{32}(?:-[0-9]+)?"', data)):
                data = data.replace(etag, self.hide(etag.decode()).encode())
        length = r.getheader("Content-Length") if self.command == "HEAD" else None
        self.reply(r.status, data, [(k, self.hide(v) if k.lower() == "etag" else v)
                                    for k, v in r.getheaders()
                                    if k.lower() not in ("content-length", "transfer-encoding",
                                                         "connection")], length)
        conn.close()

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = handle_any


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["metadata", "s3front"])
    p.add_argument("--rgw-env", required=True)
    p.add_argument("--bucket")
    p.add_argument("--lifetime", type=float, default=20)
    p.add_argument("--token", default="sk-test-token")
    p.add_argument("--bucket-region", default="eu-west-1")
    p.add_argument("--opaque-etags", action="store_true")
    a = p.parse_args()
    rgw = parse_env(a.rgw_env)
    if a.mode == "metadata":
        MetadataHandler.rotator = Rotator(rgw, a.bucket, a.lifetime)
        MetadataHandler.token = a.token
        handler = MetadataHandler
    else:
        FrontHandler.rgw = rgw
        FrontHandler.bucket_region = a.bucket_region
        FrontHandler.opaque = a.opaque_etags
        handler = FrontHandler
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    print("listening", server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
