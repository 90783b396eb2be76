"""boto3 against cairn's S3 gateway, with boto3's default settings.

Reads S3_ENDPOINT, S3_ACCESS_KEY, S3_SECRET_KEY and S3_BUCKET from the
environment (over https, AWS_CA_BUNDLE names the CA: boto3 then sends its
uploads as aws-chunked bodies with a checksum trailer),
runs puts, gets, listings, deletes, a conditional create and a multipart
upload in a bucket of its own, asserts every result, and prints "ok" and
the versions it ran with. Run by e2e/s3_test.go (TestS3Boto3).
"""
import hashlib
import io
import os
import sys

import boto3
import botocore
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError


def client():
    return boto3.client(
        "s3",
        endpoint_url=os.environ["S3_ENDPOINT"],
        aws_access_key_id=os.environ["S3_ACCESS_KEY"],
        aws_secret_access_key=os.environ["S3_SECRET_KEY"],
        region_name="us-east-1",
    )


def error_code(fn):
    try:
        fn()
    except ClientError as e:
        return e.response["Error"]["Code"]
    return None


def main():
    s3 = client()
    b = os.environ["S3_BUCKET"]
    s3.create_bucket(Bucket=b)
    assert error_code(lambda: s3.create_bucket(Bucket=b)) == "BucketAlreadyOwnedByYou"
    assert b in [x["Name"] for x in s3.list_buckets()["Buckets"]]

    # put and get, with metadata and a checksum boto3 computes by default.
    body = b"hello from boto3 " * 1000
    put = s3.put_object(Bucket=b, Key="a/hello.txt", Body=body, ContentType="text/plain", Metadata={"colour": "green"})
    assert put["ETag"] == '"%s"' % hashlib.md5(body).hexdigest(), put
    got = s3.get_object(Bucket=b, Key="a/hello.txt", ChecksumMode="ENABLED")
    assert got["Body"].read() == body
    assert got["ContentType"] == "text/plain" and got["Metadata"] == {"colour": "green"}, got
    checksums = [k for k in got if k.startswith("Checksum") and k != "ChecksumType"]
    assert checksums, "no checksum returned: %s" % got
    part = s3.get_object(Bucket=b, Key="a/hello.txt", Range="bytes=6-9")
    assert part["Body"].read() == body[6:10] and part["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert error_code(lambda: s3.get_object(Bucket=b, Key="a/hello.txt", Range="bytes=999999-")) == "InvalidRange"

    # Listing: awkward keys, a delimiter, pages of 2, url encoding (boto3
    # asks for it and decodes the keys itself).
    keys = ["a/hello.txt", "a b/c+d", "a%2Fb", "ü/日本", "x//y", "x/"]
    for k in keys[1:]:
        s3.put_object(Bucket=b, Key=k, Body=k.encode())
    seen, prefixes = [], []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=b, Delimiter="/", PaginationConfig={"PageSize": 2}):
        seen += [o["Key"] for o in page.get("Contents", [])]
        prefixes += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
    assert seen == ["a%2Fb"], seen
    assert prefixes == ["a b/", "a/", "x/", "ü/"], prefixes
    every = []
    for page in s3.get_paginator("list_objects").paginate(Bucket=b, PaginationConfig={"PageSize": 2}):
        every += [o["Key"] for o in page.get("Contents", [])]
    assert every == sorted(keys, key=lambda k: k.encode()), every

    # A conditional create: the second one fails with 412.
    s3.put_object(Bucket=b, Key="once", Body=b"1", IfNoneMatch="*")
    assert error_code(lambda: s3.put_object(Bucket=b, Key="once", Body=b"2", IfNoneMatch="*")) == "PreconditionFailed"
    assert s3.get_object(Bucket=b, Key="once")["Body"].read() == b"1"

    # A multipart upload through boto3's transfer manager, 3 parts.
    data = os.urandom(13 * 1024 * 1024)
    cfg = TransferConfig(multipart_threshold=5 * 1024 * 1024, multipart_chunksize=5 * 1024 * 1024)
    s3.upload_fileobj(io.BytesIO(data), b, "big.bin", Config=cfg)
    head = s3.head_object(Bucket=b, Key="big.bin")
    assert head["ContentLength"] == len(data) and head["ETag"].endswith('-3"'), head
    out = io.BytesIO()
    s3.download_fileobj(b, "big.bin", out, Config=cfg)
    assert hashlib.sha256(out.getvalue()).digest() == hashlib.sha256(data).digest()

    # Copy, then delete everything (one by one and in a batch).
    s3.copy_object(Bucket=b, Key="copy", CopySource={"Bucket": b, "Key": "a/hello.txt"})
    assert s3.get_object(Bucket=b, Key="copy")["Body"].read() == body
    s3.delete_object(Bucket=b, Key="copy")
    assert error_code(lambda: s3.head_object(Bucket=b, Key="copy")) == "404"
    rest = [o["Key"] for o in s3.list_objects_v2(Bucket=b)["Contents"]]
    res = s3.delete_objects(Bucket=b, Delete={"Objects": [{"Key": k} for k in rest]})
    assert len(res["Deleted"]) == len(rest) and not res.get("Errors"), res
    assert s3.list_objects_v2(Bucket=b)["KeyCount"] == 0
    s3.delete_bucket(Bucket=b)
    assert error_code(lambda: s3.head_bucket(Bucket=b)) == "404"
    print("ok boto3 %s botocore %s python %s" % (boto3.__version__, botocore.__version__, sys.version.split()[0]))


if __name__ == "__main__":
    main()
