package wire

import (
	"encoding/json"
	"net/http"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// reasons maps the HTTP codes nodehub answers on its own to the Status reason clients branch on.
var reasons = map[int]metav1.StatusReason{
	http.StatusBadRequest:            metav1.StatusReasonBadRequest,
	http.StatusUnauthorized:          metav1.StatusReasonUnauthorized,
	http.StatusForbidden:             metav1.StatusReasonForbidden,
	http.StatusNotFound:              metav1.StatusReasonNotFound,
	http.StatusMethodNotAllowed:      metav1.StatusReasonMethodNotAllowed,
	http.StatusConflict:              metav1.StatusReasonConflict,
	http.StatusGone:                  metav1.StatusReasonGone,
	http.StatusRequestEntityTooLarge: metav1.StatusReasonRequestEntityTooLarge,
	http.StatusUnprocessableEntity:   metav1.StatusReasonInvalid,
	http.StatusTooManyRequests:       metav1.StatusReasonTooManyRequests,
	http.StatusInternalServerError:   metav1.StatusReasonInternalError,
	http.StatusServiceUnavailable:    metav1.StatusReasonServiceUnavailable,
	http.StatusGatewayTimeout:        metav1.StatusReasonTimeout,
}

// NewStatus builds the Failure Status the apiserver would send for code.
func NewStatus(code int, message string) *metav1.Status {
	return &metav1.Status{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"},
		Status:   metav1.StatusFailure,
		Message:  message,
		Reason:   reasons[code],
		Code:     int32(code),
	}
}

// EncodeStatus encodes a Status as JSON or, when protobuf is true, in the protobuf envelope.
func EncodeStatus(st *metav1.Status, protobuf bool) (body []byte, contentType string) {
	if protobuf {
		if b, err := EncodeProto("v1", "Status", st); err == nil {
			return b, MediaProtobuf
		}
	}
	b, err := json.Marshal(st)
	if err != nil { // a Status of strings and numbers always marshals
		b = []byte(`{"kind":"Status","apiVersion":"v1","status":"Failure"}`)
	}
	return b, MediaJSON
}

// WriteStatus answers a request with a Failure Status of code in the media type the client accepts.
func WriteStatus(w http.ResponseWriter, accept MediaType, code int, message string) {
	body, ct := EncodeStatus(NewStatus(code, message), accept.IsProtobuf())
	h := w.Header()
	h.Set("Content-Type", ct)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-cache, private")
	if code == http.StatusTooManyRequests && h.Get("Retry-After") == "" {
		h.Set("Retry-After", "1")
	}
	w.WriteHeader(code)
	_, _ = w.Write(body)
}
