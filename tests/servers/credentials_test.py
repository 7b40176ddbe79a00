"""Credentials the way clouds hand them out, against real servers: radosgw's
STS (GetSessionToken, AssumeRole: real temporary credentials), and for what
exists only inside AWS (instance metadata, container credentials, the IAM
Identity Center portal, web identity) aws_emulator.py, which follows AWS's
protocols and hands out real radosgw users' keys that it rotates, suspending
each old user in radosgw when its credentials expire. A bucket of another
region and virtual-hosted addressing come from the emulator's S3 front.

Each reader is a process of its own (settings are read once per process),
with nothing of the test's AWS_* environment but what the case sets."""
import hashlib
import json
import os
import pathlib
import selectors
import subprocess
import sys
import textwrap
import urllib.request

import pytest

from conftest import servers_dir
from readers import DUMP, HERE, PACK, child_env, dump, one_line_error, run

EMULATOR = HERE / "aws_emulator.py"


class Emulator:
    def __init__(self, *args):
        self.proc = subprocess.Popen(["/usr/bin/python3", EMULATOR, *map(str, args)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        line = self.proc.stdout.readline() if sel.select(timeout=120) else ""
        sel.close()
        if not line.startswith("listening "):
            self.proc.kill()
            pytest.fail(f"aws_emulator did not start: {line!r} {self.proc.stderr.read()!r}")
        self.url = f"http://127.0.0.1:{int(line.split()[1])}"

    def get(self, path):
        with urllib.request.urlopen(self.url + path, timeout=120) as r:
            return json.loads(r.read())

    def stats(self):
        return self.get("/__emulator__/stats")

    def stop(self):
        alive = self.proc.poll() is None
        self.proc.terminate()
        self.proc.wait(timeout=60)
        return alive


@pytest.fixture
def emulator(datasets):
    started = []

    def start(mode, *args):
        _, bucket = datasets
        extra = ["--bucket", bucket] if mode == "metadata" else []
        started.append(Emulator(mode, "--rgw-env", servers_dir() / "rgw" / "env", *extra, *args))
        return started[-1]

    yield start
    crashed = [e.proc.returncode for e in started if not e.stop()]
    assert not crashed, f"aws_emulator exited during the test (codes {crashed})"


def bare_env(rgw, nginx, home, **extra):
    """A reader's environment with no credentials at all (and no instance
    metadata at 169.254.169.254), HOME a directory of the test's, the
    radosgw endpoint and region kept; EXTRA as child_env takes it."""
    drop = {k: None for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")}
    base = {"HOME": home, "AWS_EC2_METADATA_DISABLED": "true", **drop}
    base.update(extra)
    return child_env(rgw, nginx, **base)


def write(path, text):
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def same_epoch(sets, env, tmp_path, kind="raw"):
    want = dump(sets[kind]["local"], tmp_path / "want", os.environ.copy(), kind)
    got = dump(sets[kind]["s3"], tmp_path / "got", env, kind)
    assert got == want, "the epoch read with these credentials differs from the local one"


def test_temporary_credentials_from_sts_get_session_token(datasets, rgw, nginx, s3, tmp_path):
    import boto3
    sts = boto3.client("sts", endpoint_url=rgw["SHARDKIT_RGW_STS_URL"], region_name=rgw["AWS_REGION"],
                       aws_access_key_id=rgw["AWS_ACCESS_KEY_ID"],
                       aws_secret_access_key=rgw["AWS_SECRET_ACCESS_KEY"])
    c = sts.get_session_token(DurationSeconds=900)["Credentials"]
    sets, _ = datasets
    env = bare_env(rgw, nginx, tmp_path, AWS_ACCESS_KEY_ID=c["AccessKeyId"],
                   AWS_SECRET_ACCESS_KEY=c["SecretAccessKey"], AWS_SESSION_TOKEN=c["SessionToken"],
                   AWS_ENDPOINT_URL=rgw["SHARDKIT_RGW_STS_URL"])
    same_epoch(sets, env, tmp_path)
    # A token that is not the session's: refused, naming where the keys came from.
    env["AWS_SESSION_TOKEN"] = c["SessionToken"][:-8] + "AAAAAAAA"
    line = one_line_error(run([PACK, "inspect", sets["raw"]["s3"]], env, check=False))
    assert "the environment (AWS_ACCESS_KEY_ID)" in line, line
    assert c["SecretAccessKey"] not in line and c["SessionToken"][:40] not in line


def test_a_profile_with_a_role_assumes_it_through_sts(datasets, rgw, nginx, tmp_path):
    sets, _ = datasets
    home = tmp_path / "home"
    write(home / ".aws/credentials", f"""
        [base]
        aws_access_key_id = {rgw['AWS_ACCESS_KEY_ID']}
        aws_secret_access_key = {rgw['AWS_SECRET_ACCESS_KEY']}
        """)
    write(home / ".aws/config", f"""
        [profile reader]
        role_arn = {rgw['SHARDKIT_RGW_ROLE_ARN']}
        source_profile = base
        role_session_name = shardkit-test
        duration_seconds = 900
        """)
    env = bare_env(rgw, nginx, home, AWS_PROFILE="reader",
                   AWS_ENDPOINT_URL=rgw["SHARDKIT_RGW_STS_URL"])
    same_epoch(sets, env, tmp_path)
    # A role the user may not assume: STS says so, and the message names the role.
    write(home / ".aws/config", """
        [profile reader]
        role_arn = arn:aws:iam:::role/no-such-role
        source_profile = base
        """)
    line = one_line_error(run([PACK, "inspect", sets["raw"]["s3"]], env, check=False))
    assert "role arn:aws:iam:::role/no-such-role" in line, line


def test_region_and_endpoint_come_from_the_profile_and_keys_are_named_by_their_file(
        datasets, rgw, nginx, tmp_path):
    sets, _ = datasets
    home = tmp_path / "home"
    write(home / ".aws/credentials", f"""
        [default]
        aws_access_key_id = {rgw['AWS_ACCESS_KEY_ID']}
        aws_secret_access_key = wrong-secret
        """)
    write(home / ".aws/config", f"""
        [default]
        region = {rgw['AWS_REGION']}
        endpoint_url = {rgw['AWS_ENDPOINT_URL']}
        """)
    env = bare_env(rgw, nginx, home, AWS_ENDPOINT_URL=None, AWS_REGION=None,
                   AWS_DEFAULT_REGION=None)
    line = one_line_error(run([PACK, "inspect", sets["raw"]["s3"]], env, check=False))
    assert "SignatureDoesNotMatch" in line and ".aws/credentials [default]" in line, line
    assert "AWS_ACCESS_KEY_ID" not in line and "wrong-secret" not in line, line
    assert rgw["AWS_ENDPOINT_URL"] in line, "the endpoint from ~/.aws/config was not used: " + line
    write(home / ".aws/credentials", f"""
        [default]
        aws_access_key_id = {rgw['AWS_ACCESS_KEY_ID']}
        aws_secret_access_key = {rgw['AWS_SECRET_ACCESS_KEY']}
        """)
    same_epoch(sets, env, tmp_path)


def test_no_credentials_says_where_it_looked(datasets, rgw, nginx, tmp_path):
    sets, _ = datasets
    line = one_line_error(run([PACK, "inspect", sets["raw"]["s3"]],
                              bare_env(rgw, nginx, tmp_path), check=False))
    for part in ("no AWS credentials found", "AWS_CONTAINER_CREDENTIALS_* unset",
                 "AWS_NO_SIGN_REQUEST=1"):
        assert part in line, line


def test_instance_metadata_imdsv2(datasets, rgw, nginx, emulator, tmp_path):
    sets, _ = datasets
    e = emulator("metadata", "--lifetime", 600)
    env = bare_env(rgw, nginx, tmp_path, AWS_EC2_METADATA_DISABLED=None,
                   AWS_EC2_METADATA_SERVICE_ENDPOINT=e.url)
    same_epoch(sets, env, tmp_path)
    assert e.stats()["answers"].get("imds", 0) >= 1  # with a token: the emulator refuses v1


def test_container_credentials_with_a_token_file(datasets, rgw, nginx, emulator, tmp_path):
    sets, _ = datasets
    e = emulator("metadata", "--lifetime", 600, "--token", "tok-123")
    token = write(tmp_path / "token", "tok-123\n")
    env = bare_env(rgw, nginx, tmp_path,
                   AWS_CONTAINER_CREDENTIALS_FULL_URI=e.url + "/container/credentials",
                   AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE=token)
    same_epoch(sets, env, tmp_path)
    write(token, "another\n")
    line = one_line_error(run([PACK, "inspect", sets["raw"]["s3"]], env, check=False))
    assert "container credentials" in line and "HTTP 401" in line, line


def test_iam_identity_center_from_the_cached_login(datasets, rgw, nginx, emulator, tmp_path):
    sets, _ = datasets
    e = emulator("metadata", "--lifetime", 600, "--token", "sso-token")
    home = tmp_path / "home"
    write(home / ".aws/config", """
        [profile dev]
        sso_session = corp
        sso_account_id = 123456789012
        sso_role_name = Reader
        [sso-session corp]
        sso_region = eu-west-1
        sso_start_url = https://corp.awsapps.com/start
        """)
    cache = home / ".aws/sso/cache" / (hashlib.sha1(b"corp").hexdigest() + ".json")
    write(cache, json.dumps({"accessToken": "sso-token", "expiresAt": "2099-01-01T00:00:00Z"}))
    env = bare_env(rgw, nginx, home, AWS_PROFILE="dev", AWS_ENDPOINT_URL_SSO=e.url)
    same_epoch(sets, env, tmp_path)
    write(cache, json.dumps({"accessToken": "sso-token", "expiresAt": "2001-01-01T00:00:00Z"}))
    line = one_line_error(run([PACK, "inspect", sets["raw"]["s3"]], env, check=False))
    assert "aws sso login --profile dev" in line, line


def test_web_identity_from_the_environment(datasets, rgw, nginx, emulator, tmp_path):
    sets, _ = datasets
    e = emulator("metadata", "--lifetime", 600, "--token", "jwt-of-the-pod")
    token = write(tmp_path / "token", "jwt-of-the-pod")
    env = bare_env(rgw, nginx, tmp_path, AWS_WEB_IDENTITY_TOKEN_FILE=token,
                   AWS_ROLE_ARN="arn:aws:iam::123456789012:role/eks-reader",
                   AWS_ENDPOINT_URL_STS=e.url)
    same_epoch(sets, env, tmp_path)
    assert e.stats()["answers"].get("web_identity", 0) >= 1


def test_credential_process(datasets, rgw, nginx, tmp_path):
    sets, _ = datasets
    home = tmp_path / "home"
    prog = write(tmp_path / "creds.sh", f"""#!/bin/sh
        echo '{{"Version": 1, "AccessKeyId": "{rgw['AWS_ACCESS_KEY_ID']}", "SecretAccessKey": "{rgw['AWS_SECRET_ACCESS_KEY']}"}}'
        """)
    prog.chmod(0o755)
    write(home / ".aws/config", f"""
        [profile proc]
        credential_process = {prog}
        """)
    same_epoch(sets, bare_env(rgw, nginx, home, AWS_DEFAULT_PROFILE="proc"), tmp_path)


LONG_READ = textwrap.dedent("""
    import hashlib, json, sys, urllib.request, torch, shardkit
    path, emulator, want = sys.argv[1], sys.argv[2], sys.argv[3]
    def stats():
        with urllib.request.urlopen(emulator + "/__emulator__/stats", timeout=60) as r:
            return json.loads(r.read())
    def epoch_digest(batches):
        h = hashlib.sha256()
        for x, y in batches:
            h.update(x.numpy().tobytes() + y.numpy().tobytes())
        return h.hexdigest()
    loader = shardkit.Loader(path, batch_size=16, transform="val", size=32, workers=2, seed=3,
                             shuffle="full")
    # A map-style Dataset in DataLoader workers (forked processes) too.
    ds = shardkit.Dataset(path)
    epochs = 0
    while True:
        loader.set_epoch(0)
        assert epoch_digest(loader) == want, "an epoch read differently"
        dl = torch.utils.data.DataLoader(ds, batch_size=32, num_workers=2,
                                         collate_fn=lambda b: len(b))
        assert sum(dl) == len(ds)
        epochs += 1
        s = stats()
        # Until two lifetimes have passed: four generations, two users suspended.
        if s["generations"] >= 4 and s["suspended"] >= 2:
            break
    print("epochs", epochs, json.dumps(stats()))
""")


def test_a_loader_reads_for_longer_than_its_credentials_live(binding, datasets, rgw, nginx, emulator,
                                                             tmp_path):
    """Keys rotated twice under a Python loader (and DataLoader workers), each
    old user suspended in radosgw as its keys expire: it never fails."""
    sets, _ = datasets
    digest = textwrap.dedent("""
        import hashlib, sys, shardkit
        h = hashlib.sha256()
        for x, y in shardkit.Loader(sys.argv[1], batch_size=16, transform="val", size=32,
                                    workers=2, seed=3, shuffle="full"):
            h.update(x.numpy().tobytes() + y.numpy().tobytes())
        print(h.hexdigest())
    """)
    want = run(["/usr/bin/python3", "-c", digest, sets["jpeg"]["local"]],
               child_env(rgw, nginx)).stdout.strip()
    e = emulator("metadata", "--lifetime", 16)
    env = bare_env(rgw, nginx, tmp_path, AWS_EC2_METADATA_DISABLED=None,
                   AWS_EC2_METADATA_SERVICE_ENDPOINT=e.url)
    r = run(["/usr/bin/python3", "-c", LONG_READ, sets["jpeg"]["s3"], e.url, want], env,
            check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    s = e.stats()
    assert s["suspended"] >= 2 and s["answers"]["imds"] >= 3, s


def test_keys_revoked_under_a_reader_are_renewed_once(binding, datasets, rgw, nginx, emulator, tmp_path):
    sets, _ = datasets
    e = emulator("metadata", "--lifetime", 3600)
    script = textwrap.dedent("""
        import sys, urllib.request, shardkit
        ds = shardkit.Dataset(sys.argv[1])
        first = [ds[i][1] for i in range(len(ds))]
        urllib.request.urlopen(sys.argv[2] + "/__emulator__/revoke", timeout=120).read()
        # The old user is suspended now: the next requests (a new open, every
        # record: stored, so each a read) are refused once, renewed, sent again.
        again = shardkit.Dataset(sys.argv[1])
        assert [again[i][1] for i in range(len(again))] == first
        assert [ds[i][1] for i in range(len(ds))] == first
        print("ok")
    """)
    env = bare_env(rgw, nginx, tmp_path, AWS_EC2_METADATA_DISABLED=None,
                   AWS_EC2_METADATA_SERVICE_ENDPOINT=e.url)
    r = run(["/usr/bin/python3", "-c", script, sets["jpeg"]["s3"], e.url], env, check=False)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-3000:]
    assert e.stats()["answers"]["imds"] >= 2


def test_a_bucket_of_another_region_is_followed_there(datasets, rgw, nginx, emulator, tmp_path):
    sets, _ = datasets
    front = emulator("s3front", "--bucket-region", "eu-west-1")
    env = child_env(rgw, nginx, AWS_ENDPOINT_URL=front.url, AWS_REGION="us-east-1",
                    AWS_DEFAULT_REGION="us-east-1")
    same_epoch(sets, env, tmp_path)
    s = front.get("/__emulator__/stats")
    assert s["redirected"] >= 1 and s["forwarded"] >= 1, s


def test_virtual_hosted_requests_are_signed_for_the_bucket_host(datasets, rgw, nginx, emulator,
                                                                tmp_path):
    sets, _ = datasets
    front = emulator("s3front", "--bucket-region", rgw["AWS_REGION"])
    home = tmp_path / "home"
    write(home / ".aws/config", """
        [default]
        s3 =
          addressing_style = virtual
        """)
    port = front.url.rsplit(":", 1)[1]
    env = child_env(rgw, nginx, HOME=home, AWS_ENDPOINT_URL=f"http://localhost:{port}")
    same_epoch(sets, env, tmp_path)
    s = front.get("/__emulator__/stats")
    assert s["virtual"] >= 1 and s["bad_signature"] == 0, s
