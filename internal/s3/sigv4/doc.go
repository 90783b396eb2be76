// Package sigv4 verifies AWS Signature Version 4 on S3 requests: the
// Authorization header, presigned URLs, and the payload modes of
// x-amz-content-sha256 (a hex SHA-256, UNSIGNED-PAYLOAD, and the aws-chunked
// bodies STREAMING-AWS4-HMAC-SHA256-PAYLOAD, ...-PAYLOAD-TRAILER and
// STREAMING-UNSIGNED-PAYLOAD-TRAILER). It is pure: it imports nothing of
// cairn, does no IO but reading the request body it is given, and takes the
// clock and the key lookup from its caller. It never logs.
//
// # Use it for / do not use it for
//
// Use it for the S3 gateway's authentication: Verifier.Verify on every
// request, then read Auth.Body instead of r.Body. Do not use it for
// authorisation (who may touch which bucket is the gateway's), for SigV2
// Authorization headers or SigV4a (refused with InvalidRequest, as S3 does
// for mechanisms it does not take), for POST policy uploads, or to sign
// requests: tests use the AWS SDK's and minio-go's signers as oracles, never
// a signer of ours. SigV2 presigned URLs, which older tools still make, are
// taken (v2presign.go).
//
// # What is checked
//
// The signature is HMAC-SHA256 over a string to sign, with a key derived
// from the secret, the credential scope's date and region, "s3" and
// "aws4_request":
//
//	AWS4-HMAC-SHA256 \n X-Amz-Date \n date/region/s3/aws4_request \n hex(sha256(canonical request))
//
//	canonical request = Method \n URI \n Query \n Headers \n SignedHeaders \n x-amz-content-sha256
//
// URI is the decoded path encoded once (S3 does not encode twice; '/' runs
// are kept); a signature over the path exactly as sent is accepted too.
// Query has each parameter's name and value URI-encoded (space is %20, '+'
// in the raw query is a space), sorted by encoded name then value; a
// presigned URL's X-Amz-Signature is left out. Headers has "name:value\n"
// per signed header in the order of SignedHeaders, a header's values each
// trimmed, runs of spaces made one, and joined by ','. Host must be signed,
// and so must every x-amz-* header present (AccessDenied otherwise, as S3
// answers). A header-signed request may be at most MaxSkew (15 minutes) from
// the clock; a presigned one is valid from X-Amz-Date for X-Amz-Expires
// seconds (at most 7 days), whatever host and port it was signed for, as
// long as the request carries the same Host.
//
// # aws-chunked bodies
//
// With a STREAMING-* payload the body is a sequence of chunks:
//
//	hex-size [";chunk-signature=" 64 hex] CRLF data CRLF    (repeated)
//	"0" [";chunk-signature=" 64 hex] CRLF                   (final chunk)
//	CRLF                                                    (no trailers)
//	or  name ":" value CRLF ... ["x-amz-trailer-signature:" 64 hex CRLF] CRLF
//
// Signed chunks chain: each signature covers the previous one (the first,
// the request's signature) and the SHA-256 of its data; the final empty
// chunk is signed too, and the trailer signature covers the final chunk's
// signature and "name:value\n" of each trailer. Trailer lines may end in LF
// alone and empty lines among them are skipped (minio-go writes both); the
// trailers must be exactly those named in x-amz-trailer. An UNSIGNED-PAYLOAD
// request whose Content-Encoding holds aws-chunked and which carries
// x-amz-decoded-content-length is decoded as an unsigned aws-chunked body
// too, as S3 does for the SDKs that send it so. AWS also refuses
// non-final chunks under 8 KiB (InvalidChunkSizeError); this package takes
// them, since streaming SDK clients send them and they cost nothing more.
//
// # Bounds
//
// Nothing is buffered in proportion to the request: a chunk is at most
// MaxChunkBytes (16 MiB, InvalidChunkSizeError) and streams through; the
// Authorization header, SignedHeaders, the path, the query, a chunk line and
// the trailer section have fixed limits (the Max constants). A body reader
// holds one 16 KiB read buffer and one SHA-256 state. Header sizes as a
// whole are bounded by http.Server's MaxHeaderBytes.
//
// # Errors
//
// Every error is an *Error carrying the S3 error code and HTTP status S3
// answers with (SignatureDoesNotMatch 403, AccessDenied 403 with "Request
// has expired", RequestTimeTooSkewed 403, InvalidAccessKeyId 403,
// AuthorizationHeaderMalformed 400, AuthorizationQueryParametersError 400,
// XAmzContentSHA256Mismatch 400, IncompleteBody 400, ...), except that a
// body reader passes on the underlying body's own read errors unchanged.
// Messages never hold a secret or a signature computed here.
//
// # Concurrency
//
// A Verifier is read-only once built and safe for concurrent use. An Auth
// and its Body belong to one request and one goroutine.
package sigv4
