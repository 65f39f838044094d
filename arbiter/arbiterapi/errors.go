package arbiterapi

import "strings"

// FieldError is one problem with one field of a request body.
type FieldError struct {
	Field string // JSON path such as "capacity.milliCPU" or "numa[1].lendable.gpuUUIDs[0]"
	Msg   string
}

func (e FieldError) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return e.Field + ": " + e.Msg
}

// FieldErrors is every problem found in a request body.
type FieldErrors []FieldError

func (es FieldErrors) Error() string {
	msgs := make([]string, len(es))
	for i, e := range es {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "; ")
}

// ErrorBody is the body of every error answer of the arbiter's API.
type ErrorBody struct {
	Error  string       `json:"error"`
	Fields []ErrorField `json:"fields,omitempty"`
}

// ErrorField is one field at fault in an ErrorBody.
type ErrorField struct {
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// Body is the error answer that reports es.
func (es FieldErrors) Body() ErrorBody {
	body := ErrorBody{Error: es.Error()}
	for _, e := range es {
		body.Fields = append(body.Fields, ErrorField{Field: e.Field, Message: e.Msg})
	}
	return body
}
