package sigv4

import "net/http"

// Error is a verification failure as S3 reports it: the error code of its XML
// error body and the HTTP status. Every error Verify and the body readers
// return is an *Error. errors.Is matches two *Errors with the same Code, so
// errors.Is(err, ErrSignatureDoesNotMatch) holds whatever the message.
type Error struct {
	Code    string // S3 error code, e.g. "SignatureDoesNotMatch"
	Status  int    // HTTP status S3 answers with
	Message string // human-readable; never contains the secret or a signature we computed
}

func (e *Error) Error() string { return "sigv4: " + e.Code + ": " + e.Message }

// Is reports whether target is an *Error with the same Code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// with returns a copy of e with another message.
func (e *Error) with(msg string) *Error {
	c := *e
	c.Message = msg
	return &c
}

// The errors Verify returns, with the codes and statuses S3 uses for them.
var (
	ErrAccessDenied = &Error{"AccessDenied", http.StatusForbidden, "Access Denied"}
	// ErrExpired is AccessDenied, as S3 answers an expired presigned URL.
	ErrExpired               = &Error{"AccessDenied", http.StatusForbidden, "Request has expired"}
	ErrSignatureDoesNotMatch = &Error{"SignatureDoesNotMatch", http.StatusForbidden,
		"The request signature we calculated does not match the signature you provided. Check your key and signing method."}
	ErrInvalidAccessKeyID = &Error{"InvalidAccessKeyId", http.StatusForbidden,
		"The AWS Access Key Id you provided does not exist in our records."}
	ErrRequestTimeTooSkewed = &Error{"RequestTimeTooSkewed", http.StatusForbidden,
		"The difference between the request time and the current time is too large."}
	ErrAuthorizationHeaderMalformed = &Error{"AuthorizationHeaderMalformed", http.StatusBadRequest,
		"The authorization header is malformed."}
	ErrAuthorizationQueryParameters = &Error{"AuthorizationQueryParametersError", http.StatusBadRequest,
		"Error parsing the X-Amz-Credential parameter."}
	ErrContentSHA256Mismatch = &Error{"XAmzContentSHA256Mismatch", http.StatusBadRequest,
		"The provided 'x-amz-content-sha256' header does not match what was computed."}
	ErrIncompleteBody = &Error{"IncompleteBody", http.StatusBadRequest,
		"You did not provide the number of bytes specified by the Content-Length HTTP header."}
	ErrInvalidChunkSize = &Error{"InvalidChunkSizeError", http.StatusBadRequest,
		"A chunk of the aws-chunked body is larger than 16 MiB."}
	ErrMalformedTrailer = &Error{"MalformedTrailerError", http.StatusBadRequest,
		"The request contained trailing data that was not well-formed or did not conform to our published schema."}
	ErrInvalidRequest  = &Error{"InvalidRequest", http.StatusBadRequest, "Invalid Request"}
	ErrInvalidArgument = &Error{"InvalidArgument", http.StatusBadRequest, "Invalid Argument"}
	ErrInvalidURI      = &Error{"InvalidURI", http.StatusBadRequest, "Couldn't parse the specified URI."}
)
