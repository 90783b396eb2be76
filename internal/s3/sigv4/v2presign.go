package sigv4

import (
	"crypto/hmac"
	"crypto/sha1"
	"encoding/base64"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Presigned URLs of AWS Signature Version 2 (query string authentication):
// older tools still make them (s3cmd signurl, boto 2), and S3 still takes
// them. The URL carries AWSAccessKeyId, Expires (Unix seconds) and
// Signature, the base64 HMAC-SHA1 with the secret of
//
//	Method \n Content-MD5 \n Content-Type \n Expires \n AmzHeaders Resource
//
// AmzHeaders is "name:value\n" for each x-amz-* header, names in lower case
// and sorted, a header's values joined by ','. Resource is "/bucket/key" as
// sent (the bucket from the Host for a virtual-hosted request, which
// Verifier.BucketOfHost tells), then the subresources of the query that S3
// signs (v2SubResources), sorted, "?name=value&name", values decoded. Only
// presigned URLs are taken: an Authorization header of SigV2 ("AWS key:sig")
// stays refused, as SigV4-only S3 regions refuse it.

// v2SubResources are the query parameters a SigV2 signature covers.
var v2SubResources = []string{
	"acl", "cors", "delete", "encryption", "legal-hold", "lifecycle", "location", "logging",
	"notification", "partNumber", "policy", "replication", "requestPayment",
	"response-cache-control", "response-content-disposition", "response-content-encoding",
	"response-content-language", "response-content-type", "response-expires", "restore",
	"retention", "select", "select-type", "tagging", "torrent", "uploadId", "uploads",
	"versionId", "versioning", "versions", "website",
}

// maxV2Expires bounds the digits of Expires (Unix seconds fit in 12).
const maxV2Expires = 12

// verifyPresignedV2 checks a SigV2 presigned URL.
func (v *Verifier) verifyPresignedV2(r *http.Request, query params) (*Auth, error) {
	bad := ErrAuthorizationQueryParameters
	key, exp, sig := query.get("AWSAccessKeyId"), query.get("Expires"), query.get("Signature")
	if len(key) != 1 || len(exp) != 1 || len(sig) != 1 {
		return nil, bad.with("Query-string authentication requires the Signature, Expires and AWSAccessKeyId parameters")
	}
	if len(exp[0]) > maxV2Expires || !isDigits(exp[0]) {
		return nil, bad.with("Invalid Expires parameter: Unix seconds expected")
	}
	want, err := base64.StdEncoding.DecodeString(sig[0])
	if err != nil || len(want) != sha1.Size {
		return nil, ErrSignatureDoesNotMatch
	}
	expires, _ := strconv.ParseInt(exp[0], 10, 64)
	if v.now().Unix() > expires {
		return nil, ErrExpired
	}
	secret, user, ok := v.Lookup(key[0])
	if !ok {
		return nil, ErrInvalidAccessKeyID
	}
	if !v2SignatureMatches(r, query, exp[0], v.bucketOfHost(r.Host), secret, want) {
		return nil, ErrSignatureDoesNotMatch
	}
	body := r.Body
	if body == nil {
		body = http.NoBody
	}
	return &Auth{AccessKey: key[0], User: user, Time: time.Unix(expires, 0).UTC(), Presigned: true,
		Payload: PayloadUnsigned, Body: body, DecodedLength: -1}, nil
}

func (v *Verifier) bucketOfHost(host string) string {
	if v.BucketOfHost == nil {
		return ""
	}
	return v.BucketOfHost(host)
}

// v2SignatureMatches compares the signature with the one of the request's
// path as sent and, where that differs, of its decoded path encoded again
// (signers differ in how they encode keys).
func v2SignatureMatches(r *http.Request, query params, expires, bucket, secret string, want []byte) bool {
	paths := []string{r.URL.EscapedPath()}
	if again := uriEncode(r.URL.Path, true); again != paths[0] {
		paths = append(paths, again)
	}
	for _, p := range paths {
		if bucket != "" {
			p = "/" + bucket + p
		}
		mac := hmac.New(sha1.New, []byte(secret))
		mac.Write([]byte(v2StringToSign(r, query, expires, p)))
		if hmac.Equal(mac.Sum(nil), want) {
			return true
		}
	}
	return false
}

func v2StringToSign(r *http.Request, query params, expires, path string) string {
	var b strings.Builder
	b.WriteString(r.Method + "\n" + r.Header.Get("Content-Md5") + "\n" + r.Header.Get("Content-Type") + "\n" + expires + "\n")
	var amz []string
	for name := range r.Header {
		if l := strings.ToLower(name); strings.HasPrefix(l, "x-amz-") {
			amz = append(amz, l)
		}
	}
	slices.Sort(amz)
	for _, name := range amz {
		vals := slices.Clone(r.Header.Values(name))
		for i := range vals {
			vals[i] = strings.TrimSpace(vals[i])
		}
		b.WriteString(name + ":" + strings.Join(vals, ",") + "\n")
	}
	b.WriteString(path)
	sep := "?"
	for _, name := range v2SubResources {
		if vals := query.get(name); len(vals) > 0 {
			b.WriteString(sep + name)
			if vals[0] != "" {
				b.WriteString("=" + vals[0])
			}
			sep = "&"
		}
	}
	return b.String()
}
