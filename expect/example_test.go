package expect_test

import (
	"errors"
	"fmt"

	"github.com/jetpool/jetpool/expect"
)

func ExampleChecker_Check() {
	c, err := expect.New(map[string]any{
		"type":     "object",
		"required": []any{"title", "author"},
		"properties": map[string]any{
			"year": map[string]any{"type": "integer"},
		},
	})
	if err != nil {
		panic(err)
	}

	// Prose and fences around the value are fine.
	v, err := c.Check("Here it is:\n```json\n{\"title\": \"Dune\", \"author\": \"Frank Herbert\"}\n```", "stop")
	fmt.Println(v, err)

	// A value that fails the schema is a *Violation, with the correction a
	// repair sends back.
	_, err = c.Check(`{"title": "Dune", "year": "1965"}`, "stop")
	var viol *expect.Violation
	if errors.As(err, &viol) {
		fmt.Println(viol.Error())
		fmt.Println(viol.Correction())
	}
	// Output:
	// map[author:Frank Herbert title:Dune] <nil>
	// 2 schema errors: at (root): missing property 'author'; at /year: got string, want integer
	// Your previous reply does not match the required JSON Schema:
	// - at (root): missing property 'author'
	// - at /year: got string, want integer
	// Reply again with only the corrected JSON value: no explanation and no code fences.
}
