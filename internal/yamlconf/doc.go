// Package yamlconf holds what the agent's config (agent/config) and the arbiter's files (its
// config, the policy, the tokens file) share to be read the same way: decoding YAML node by
// node with messages that show what was found, problems with file:line: key, YAML syntax
// errors on a 1-based line count, and sizes in bytes ("512Mi").
//
// It imports nothing of tidal, so both sides can use it without importing each other.
package yamlconf
